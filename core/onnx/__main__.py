"""`python -m core.onnx compile model.onnx -o model.core` and `python -m core.onnx run model.core`: compile an ONNX model once on
DEV, and replay the saved programs later (on the same device kind) without compiling anything."""
from __future__ import annotations
import argparse, sys
import numpy as np

def _pairs(items: list[str], what: str) -> dict[str, str]:
  out = {}
  for it in items:
    name, sep, val = it.partition("=")
    if not sep or not name: raise SystemExit(f"error: {what} {it!r} must be NAME=VALUE")
    out[name] = val
  return out

def _shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
  try: return {k: tuple(int(d) for d in v.split(",")) for k, v in _pairs(items, "--shape").items()}
  except ValueError: raise SystemExit(f"error: --shape takes NAME=D0,D1,... with integer dims, got {items}") from None

def _load_npy(items: list[str]) -> dict[str, np.ndarray]:
  return {k: np.load(v, allow_pickle=False) for k, v in _pairs(items, "--input").items()}

def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m core.onnx", description=__doc__)
  sub = p.add_subparsers(dest="cmd", required=True)
  c = sub.add_parser("compile", help="run the model once on DEV and save its compiled programs and weights")
  c.add_argument("model", help="the .onnx file")
  c.add_argument("-o", "--output", required=True, help="the compiled file to write (e.g. model.core)")
  c.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,..", help="an input's shape (default: the model's, unknown dims 1)")
  c.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="run the capture on this input (default: random)")
  r = sub.add_parser("run", help="replay a compiled file with new inputs (nothing is compiled)")
  r.add_argument("compiled", help="the file `compile` wrote")
  r.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input as a .npy file")
  r.add_argument("--random", action="store_true", help="random values for the inputs not given with --input")
  r.add_argument("--seed", type=int, default=0, help="seed of --random")
  r.add_argument("-o", "--output", help="save the outputs to this .npz file")
  args = p.parse_args(argv)
  from core.engine.export import CompiledFileError
  try:
    if args.cmd == "compile":
      from core.onnx.compiled import compile_model
      g = compile_model(args.model, shapes=_shapes(args.shape), inputs=_load_npy(args.input))
      g.save(args.output)
      weights = sum(b.nbytes for b in g.buffers if b.data is not None)
      print(f"compiled {args.model} for {g.kind['dev']} ({g.kind['renderer']}): {len(g.programs)} programs, {weights} bytes of weights -> {args.output}")
      return 0
    from core.onnx.compiled import load_compiled, random_input
    model = load_compiled(args.compiled)
    given = _load_npy(args.input)
    rng = np.random.default_rng(args.seed)
    missing = [n for n in model.input_names if n not in given]
    if missing and not args.random: raise SystemExit(f"error: no value for inputs {missing}: pass --input NAME=FILE.npy or --random")
    feeds = {n: given[n] if n in given else random_input(s, dt, rng) for n, s, dt in model.inputs}
    outs = model(feeds)
    for name, v in outs.items():
      flat = v.reshape(-1)
      print(f"{name}: shape {v.shape} {v.dtype.name}  [{' '.join(f'{x:.6g}' for x in flat[:8].tolist())}{' ...' if flat.size > 8 else ''}]")
    if args.output:
      np.savez(args.output, **outs)  # type: ignore[arg-type]  # numpy's stub types **kwds as its allow_pickle flag
      print(f"saved {len(outs)} outputs to {args.output}")
    return 0
  except (CompiledFileError, ValueError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2

if __name__ == "__main__": sys.exit(main())
