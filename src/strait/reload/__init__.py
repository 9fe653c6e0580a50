"""Reload without restart: SIGHUP or a change of the configuration file (or of a secret file it
references) reads the configuration again; what can change in a running process changes, the
rest is named as needing a restart (:mod:`strait.reload.plan` decides, :mod:`strait.reload.reloader`
reads and applies)."""
