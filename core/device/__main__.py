"""`python -m core.device`: the doctor. Lists plugins, their devices, renderers and availability (and why not), with the DEV=
to pick each; checks DEV when it is set and exits non-zero when it names something unusable."""
from __future__ import annotations
import argparse, os, sys
from core.device.plugins import PluginError, PluginManager, get_plugins
from core.device.target import GRAMMAR, DevSyntaxError, parse_dev

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
    broken = spec.factory_error()
    avail = "broken" if broken else "files" if spec.name == "DISK" else "compile-only" if spec.priority < 0 else \
      "available" if spec.available() else "unavailable"
    mark = "  <- default" if spec.name == best else ""
    lines.append(f"  {spec.name:<8} {avail:<12} priority {spec.priority:<4} from {rec.dist}{mark}")
    if spec.description: lines.append(f"      {spec.description}")
    if broken: lines.append(f"      broken: {broken}")
    elif avail == "unavailable": lines.append(f"      why: {spec.why_unavailable()}")
    lines.append(f"      interfaces: {', '.join(spec.interfaces) or '-'}   renderers: "
                 + (", ".join(r + (" (default)" if r == spec.renderer_name(None) else "") for r in spec.renderers) or ("none" if spec.name == "DISK" else "borrowed")))
    sels = [f"DEV={spec.name}"] + [f"DEV={spec.name}:{r}" for r in spec.renderers] + [f"DEV={i}+{spec.name}" for i in spec.interfaces[1:]]
    if spec.name == "NULL": sels += ["DEV=NULL:<RENDERER>[:ARCH] (e.g. NULL:C, NULL:LLVM, NULL:AMD:gfx1100)"]
    if spec.name == "DISK": sels = ["device='disk:<path>' (one device per file; DEV=DISK:<path>)"]
    lines.append(f"      select with: {'  '.join(sels)}")
  lines.append(f"DEV is {os.getenv('DEV')!r}" if os.getenv("DEV") else f"DEV is unset: the default is {best}")
  return "\n".join(lines)

def check_dev(pm: PluginManager, dev: str) -> list[str]:
  """Problems with the DEV value `dev` (empty when every target can be used): syntax, unknown names, a broken plugin, or a
  device whose default interface is unavailable here when DEV asks for that interface."""
  try: targets = parse_dev(dev)
  except DevSyntaxError as e: return [str(e)]
  problems = []
  for t in targets:
    try: spec = pm.resolve_target(t)
    except PluginError as e:
      problems.append(f"DEV entry {t}: {e}")
      continue
    if (broken := spec.factory_error()) is not None: problems.append(f"DEV entry {t}: device {spec.name} is broken: {broken}")
    elif spec.priority >= 0 and t.interface in (None, next(iter(spec.interfaces), None)) and not spec.available():
      others = [f"{i}+{spec.name}" for i in spec.interfaces[1:]]
      problems.append(f"DEV entry {t}: device {spec.name} is unavailable here: {spec.why_unavailable()}"
                      + (f" (other interfaces: {', '.join(others)})" if others else ""))
  return problems

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m core.device", description="The doctor: which backend plugins are installed, their devices, "
                               "renderers and interfaces, whether each can run here (and why not), and the DEV string that picks it.",
                               epilog=f"DEV grammar: {GRAMMAR}. Exits 1 when DEV is set and names something unusable.")
  ap.add_argument("--dev", default=os.getenv("DEV"), help="check this DEV value instead of the environment's DEV")
  args = ap.parse_args(argv)
  pm = get_plugins()
  print(report(pm))
  if not args.dev: return 0
  if (problems := check_dev(pm, args.dev)):
    print("\n".join(f"problem: {p}" for p in problems), file=sys.stderr)
    return 1
  print(f"DEV={args.dev} can be used")
  return 0

if __name__ == "__main__":
  sys.exit(main())
