"""PerDevice: an interface's HCQ objects, one per device name for the life of the process; PerProcess: its driver, one per
process; node_open_error: the error a failed open of the driver's device node raises."""
import errno, subprocess, sys, textwrap, threading
import pytest
from core.device.hcq import PerDevice, PerProcess, node_open_error

class Obj:
  def __init__(self, name: str, arch: str):
    self.name, self.arch, self.closed = name, arch, False

def test_one_object_per_device_name_until_it_is_not_kept():
  objs: PerDevice[Obj] = PerDevice()
  a = objs.get("X", lambda: Obj("X", "v1"))
  assert objs.get("X", lambda: Obj("X", "v2")) is a   # reopened: the same queues
  assert objs.get("X:1", lambda: Obj("X:1", "v1")) is not a
  b = objs.get("X", lambda: Obj("X", "v2"), keep=lambda h: h.arch == "v2")   # opened for another arch: a new one
  assert b is not a and b.arch == "v2" and objs.get("X", lambda: Obj("X", "v3"), keep=lambda h: not h.closed) is b
  b.closed = True
  assert objs.get("X", lambda: Obj("X", "v3"), keep=lambda h: not h.closed).arch == "v3"
  assert sorted(o.name for o in objs.values()) == ["X", "X:1"]

def test_a_constructor_may_look_at_the_other_objects():
  objs: PerDevice[Obj] = PerDevice()
  objs.get("A", lambda: Obj("A", "v"))
  seen: list[list[str]] = []
  def make() -> Obj:
    seen.append([o.name for o in objs.values()])
    return Obj("B", "v")
  t = threading.Thread(target=objs.get, args=("B", make))
  t.start()
  t.join(10)
  assert not t.is_alive() and seen == [["A"]]

def test_on_exit_runs_for_each_object_at_interpreter_exit():
  code = textwrap.dedent("""
    from core.device.hcq import PerDevice
    objs = PerDevice(on_exit=lambda h: print("closed", h))
    objs.get("A", lambda: "a"); objs.get("B", lambda: "b")
  """)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
  assert out.split("\n") == ["closed a", "closed b", ""]

def test_the_driver_is_made_once_and_a_failed_open_is_tried_again():
  made: list[int] = []
  def make() -> int:
    made.append(len(made))
    if len(made) == 1: raise FileNotFoundError("no driver yet")
    return len(made)
  drv: PerProcess[int] = PerProcess(make)
  with pytest.raises(FileNotFoundError): drv.get()
  threads = [threading.Thread(target=drv.get) for _ in range(8)]
  for t in threads: t.start()
  for t in threads: t.join(10)
  assert drv.get() == 2 and made == [0, 1]

class DriverError(OSError): pass

@pytest.mark.parametrize("e, code, msg", [
  (FileNotFoundError(errno.ENOENT, "x"), errno.ENOENT,
   "X+Y needs /dev/x (the x kernel driver); there is none here. Use MOCK+Y instead"),
  (PermissionError(errno.EACCES, "x"), errno.EACCES, "X+Y: permission denied opening /dev/x: join group 'x'"),
  (OSError(errno.EBUSY, "busy"), errno.EBUSY, "X+Y: opening /dev/x failed: [Errno 16] busy")])
def test_node_open_error_says_the_fix(e: OSError, code: int, msg: str):
  err = node_open_error(DriverError, "X+Y", "/dev/x", e, "the x kernel driver", "Use MOCK+Y instead", "join group 'x'")
  assert type(err) is DriverError and err.errno == code and err.strerror == msg
