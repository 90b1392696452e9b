"""Kernel AST -> optimized, linearized program, and the shared renderers (c_style.py, llvm_ir.py) that plugins subclass."""
