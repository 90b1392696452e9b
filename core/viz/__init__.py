"""VIZ=1: a local web page (server.py, page.html) over what core.ir.rewrite_log recorded: each kernel's rewrite passes, the
graphs before and after, and the rules that fired."""
