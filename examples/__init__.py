"""Example dataflows; ``python -m examples`` runs them all and prints their results."""
