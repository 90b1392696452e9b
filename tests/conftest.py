"""Core's tests always check the validity rules of every stage (core/ir/spec.py), unless SPEC is set explicitly."""
import os

os.environ.setdefault("SPEC", "1")
