"""`python -m core.device`: the doctor. Lists plugins, their devices, renderers and availability, with the DEV= to pick each."""
from __future__ import annotations
import os, sys
from core.device.plugins import PluginManager, get_plugins

def report(pm: PluginManager) -> str:
  lines = ["plugins (entry point group core.plugins):"]
  recs = pm.records()
  for rec in recs:
    pm.load(rec)
    state = "disabled by CORE_DISABLED_PLUGINS" if rec.disabled else "ERROR" if rec.error else "ok"
    lines.append(f"  {rec.dist:<20} {rec.version:<10} api {rec.api:<6} {rec.value:<24} {state}")
    if rec.error is not None:
      lines += ["      " + ln for ln in str(rec.error).splitlines()]
      if rec.error.__cause__ is not None: lines.append(f"      cause: {type(rec.error.__cause__).__name__}: {rec.error.__cause__}")
  for dev, who in pm.conflicts.items(): lines.append(f"  CONFLICT: device {dev} is claimed by {' and '.join(r.label() for r in who)}")
  lines.append("devices:")
  best = pm.best_device()
  for rec, spec in sorted(pm.all_specs(), key=lambda rs: (-rs[1].priority, rs[1].name)):
    avail = "compile-only" if spec.priority < 0 else "available" if spec.available() else "unavailable"
    mark = "  <- default" if spec.name == best else ""
    lines.append(f"  {spec.name:<8} {avail:<12} priority {spec.priority:<4} from {rec.dist}{mark}")
    if spec.description: lines.append(f"      {spec.description}")
    lines.append(f"      interfaces: {', '.join(spec.interfaces) or '-'}   renderers: "
                 + (", ".join(r + (' (default)' if r == spec.renderer_name(None) else '') for r in spec.renderers) or "borrowed"))
    sels = [f"DEV={spec.name}"] + [f"DEV={spec.name}:{r}" for r in spec.renderers] + [f"DEV={i}+{spec.name}" for i in spec.interfaces[1:]]
    if spec.name == "NULL": sels += ["DEV=NULL:<RENDERER>[:ARCH] (e.g. NULL:C, NULL:LLVM, NULL:AMD:gfx1100)"]
    lines.append(f"      select with: {'  '.join(sels)}")
  lines.append(f"DEV is {os.getenv('DEV')!r}" if os.getenv("DEV") else f"DEV is unset: the default is {best}")
  return "\n".join(lines)

if __name__ == "__main__":
  print(report(get_plugins()))
  sys.exit(0)
