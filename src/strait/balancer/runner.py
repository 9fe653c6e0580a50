"""The background executor started by `strait balance execute --detach` (and `--resume --detach`).

It takes nothing but the execution id and the cluster properties (from the environment, so
secrets do not show in `ps`); the plan and progress come from the cluster's state topic.
"""

from __future__ import annotations

import argparse
import json
import logging
import os

from strait import logformat
from strait.balancer import executor
from strait.balancer.errors import ClusterError
from strait.balancer.gateway import KafkaGateway
from strait.balancer.state import StateStore
from strait.secrets import install_log_redaction


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="strait-balance-runner", description=__doc__)
    parser.add_argument("--execution", required=True, help="Execution id recorded in the state topic.")
    args = parser.parse_args(argv)
    logformat.configure(logging.INFO, logformat.from_environment())  # the format `strait ... --log-format` chose
    install_log_redaction()  # the cluster's password or key never reaches the run's log file
    logging.getLogger("kafka").setLevel(logging.WARNING)
    props = json.loads(os.environ["STRAIT_BALANCE_PROPS"])
    try:
        gateway = KafkaGateway(props)
    except ClusterError as exc:
        # Said once through logging (so in the chosen format, in the run's log file), not as a traceback.
        logging.error("execution %s cannot start: %s", args.execution, exc)
        return 2
    try:
        final = executor.resume(gateway, StateStore(props), args.execution).run()
    finally:
        gateway.close()
    logging.info(
        "execution %s ended: %s (%d done, %d failed)", final.execution_id, final.status, final.done, final.failed
    )
    return 1 if final.failed or final.status == "failed" else 0


if __name__ == "__main__":
    raise SystemExit(main())
