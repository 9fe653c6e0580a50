"""HTTP interfaces of Strait's services."""
