"""A shim for tools that look for setup.py: the project is configured in pyproject.toml (PEP 621), which
``pip install -e .`` reads either way."""

from setuptools import setup

setup()
