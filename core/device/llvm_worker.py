"""The LLVM compile worker: a child process that runs llvm_object's compiles over pipes, so llvmlite's per-compile leak
stays out of the user's process and is bounded by restarting the worker (`python -m core.device.llvm_worker` is the child).

Protocol, both ways: an 8-byte little-endian length, then a pickle. Request: (LLVMTarget, src, what, assembly). Reply:
("ok", bytes), ("CompileError", message) or (exception type name, message). The child exits when its stdin closes, so it
never outlives the process that started it."""
from __future__ import annotations
import atexit, os, pickle, signal, struct, subprocess, sys, threading
from typing import IO, Any
from core.device.compiler import LLVM_WORKER_COMPILES, CompileError, LLVMTarget, llvm_compile_here

_HEAD = struct.Struct("<Q")

def _read_message(f: IO[bytes]) -> Any:
  """One framed pickle from `f`; None on a clean end of stream, EOFError on a torn one."""
  head = f.read(_HEAD.size)
  if not head: return None
  if len(head) < _HEAD.size: raise EOFError("the stream ended inside a message header")
  body = f.read(n := _HEAD.unpack(head)[0])
  if len(body) < n: raise EOFError(f"the stream ended after {len(body)} of {n} message bytes")
  return pickle.loads(body)

def _write_message(f: IO[bytes], obj: Any) -> None:
  body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
  f.write(_HEAD.pack(len(body)) + body)
  f.flush()

# *** the child ***

def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
  """Answers compile requests until `requests` ends."""
  while (req := _read_message(requests)) is not None:
    target, src, what, assembly = req
    try: reply: tuple[str, Any] = ("ok", llvm_compile_here(target, src, what, assembly))
    except CompileError as e: reply = ("CompileError", str(e))
    except Exception as e: reply = (type(e).__name__, str(e))
    _write_message(replies, reply)

def main() -> None:
  import llvmlite.binding as llvm
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  llvm.initialize_native_asmparser()
  # replies get a private copy of stdout; fd 1 becomes stderr so anything LLVM or a library prints can't corrupt the stream
  replies = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  try: serve(sys.stdin.buffer, replies)
  except BrokenPipeError: pass   # the parent went away mid-reply

# *** the parent ***

class WorkerDied(RuntimeError):
  """The worker process ended (or its pipe broke) before answering."""

class LLVMWorker:
  """One running worker process and its pipes. Not thread-safe by itself: the module's lock serialises requests."""
  def __init__(self) -> None:
    self.owner, self.compiles = os.getpid(), 0
    # a session of its own: Ctrl-C in the terminal interrupts the parent (which then discards this worker), not the worker
    self.proc = subprocess.Popen(worker_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_worker_env(), start_new_session=True)

  @property
  def pid(self) -> int: return self.proc.pid

  def request(self, req: tuple[LLVMTarget, str, str, bool]) -> tuple[str, Any]:
    assert self.proc.stdin is not None and self.proc.stdout is not None
    try:
      _write_message(self.proc.stdin, req)
      reply = _read_message(self.proc.stdout)
    except (OSError, EOFError) as e: raise WorkerDied(self._why(e)) from e
    if reply is None: raise WorkerDied(self._why(None))
    self.compiles += 1
    return reply

  def _why(self, e: BaseException | None) -> str:
    try: rc = self.proc.wait(timeout=1)
    except subprocess.TimeoutExpired: rc = None
    how = "is still running" if rc is None else f"was killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"
    return f"the LLVM compile worker (pid {self.proc.pid}) {how}" + (f" ({type(e).__name__}: {e})" if e is not None else "")

  def close(self, kill: bool = False) -> None:
    """Ends the worker and reaps it: closing stdin lets it finish and exit; `kill` (or a worker that does not exit) kills it."""
    if self.owner != os.getpid(): return   # a forked child's copy: the process belongs to the parent
    if kill: self.proc.kill()
    for f in (self.proc.stdin, self.proc.stdout):
      try:
        if f is not None: f.close()
      except OSError: pass
    try: self.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      self.proc.wait()

def worker_argv() -> list[str]: return [sys.executable, "-m", "core.device.llvm_worker"]

def _worker_env() -> dict[str, str]:
  # the child imports this checkout's core even where it is not installed (run from a source tree)
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([root] + ([p] if (p := env.get("PYTHONPATH")) else []))
  return env

_lock = threading.Lock()
_worker: LLVMWorker | None = None
worker_starts = worker_compiles = 0   # workers this process started (restarts included), compiles they answered

def _ready_worker() -> LLVMWorker:
  global _worker, worker_starts
  if _worker is not None and _worker.owner != os.getpid(): _worker = None   # inherited through fork: its pipes are shared
  if _worker is not None and _worker.compiles >= max(1, LLVM_WORKER_COMPILES.value):
    _worker.close()   # used up: its leak is bounded by the compiles it ran
    _worker = None
  if _worker is None:
    _worker = LLVMWorker()
    worker_starts += 1
  return _worker

def compile_in_worker(target: LLVMTarget, src: str, what: str = "", assembly: bool = False) -> bytes:
  """llvm_object in the worker process: the same bytes, the same CompileError text. A worker that dies is replaced and the
  compile retried once; a second death is a CompileError (what would have killed this process if compiled here)."""
  global _worker, worker_compiles
  with _lock:
    died: list[str] = []
    for _ in range(2):
      worker = _ready_worker()
      try: kind, payload = worker.request((target, src, what, assembly))
      except WorkerDied as e:
        died.append(str(e))
        worker.close(kill=True)
        _worker = None
        continue
      except BaseException:
        # interrupted mid-request (Ctrl-C): its reply would answer the next request, so this worker goes
        worker.close(kill=True)
        _worker = None
        raise
      worker_compiles += 1
      if kind == "ok": return payload
      if kind == "CompileError": raise CompileError(payload)
      raise RuntimeError(f"the LLVM compile worker raised {kind}: {payload}")
  raise CompileError(f"the LLVM compile worker died twice compiling{' for ' + what if what else ''}: {died[0]}; then {died[1]}\n"
                     f"--- source ---\n{src}")

_off_process_failed = False   # the worker could not compile once: compile_off_process compiles here from then on

def compile_off_process(target: LLVMTarget, src: str, what: str = "", assembly: bool = False) -> bytes:
  """compile_in_worker for a thread that wants its compiles out of this process (llvmlite's calls run one at a time in a
  process), falling back to this process where the worker can't start or dies: the same bytes either way, and an IR error
  raises here the CompileError the worker gave."""
  global _off_process_failed
  if not _off_process_failed:
    try: return compile_in_worker(target, src, what, assembly)
    except CompileError as e:
      if not str(e).startswith("the LLVM compile worker died"): raise
      _off_process_failed = True
    except Exception: _off_process_failed = True   # no worker (spawn failed) or a broken reply
  return llvm_compile_here(target, src, what, assembly)

def worker_pid() -> int | None:
  """The running worker's process id, or None when there is none (none started yet, or it was replaced)."""
  return _worker.pid if _worker is not None and _worker.owner == os.getpid() else None

def shutdown() -> None:
  """Ends the worker (at exit, and for tests); the next compile that needs one starts it again."""
  global _worker
  with _lock:
    if _worker is not None: _worker.close()
    _worker = None

atexit.register(shutdown)

if __name__ == "__main__": main()
