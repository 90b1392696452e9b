"""Makes plugin_cpu importable from a source checkout when the plugin is not installed."""
import importlib.util, pathlib, sys
if importlib.util.find_spec("plugin_cpu") is None: sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
root = pathlib.Path(__file__).resolve().parents[3]
if importlib.util.find_spec("core") is None: sys.path.insert(0, str(root))
