"""Operator runtimes (internal): one module per family of operators."""
