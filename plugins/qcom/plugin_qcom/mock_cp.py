"""A software Adreno command processor: decodes the PM4 stream lower.py writes (type-4 register writes, type-7 packets), checks
every header and field, performs memory writes, waits and timestamps, and runs each CP_EXEC_CS through a `Launcher` (the MOCK
interface's runs the kernel's OpenCL C on the CL interface). A malformed packet is a `PacketError` naming its byte offset."""
from __future__ import annotations
import bisect, ctypes, dataclasses, struct, threading, time
from typing import Any, Protocol
from plugin_qcom import descriptors, pm4, regs
from plugin_qcom.pm4 import PacketError
from plugin_qcom.prep import image_args, signature

class Memory:
  """The device memory the processor may touch: registered host allocations (start, size). Any other address is a fault."""
  def __init__(self) -> None:
    self._starts: list[int] = []
    self._spans: dict[int, tuple[int, Any]] = {}
    self._lock = threading.Lock()
  def register(self, addr: int, size: int, keep: Any = None) -> None:
    with self._lock:
      if addr not in self._spans: bisect.insort(self._starts, addr)
      self._spans[addr] = (size, keep)
  def unregister(self, addr: int) -> None:
    with self._lock:
      if self._spans.pop(addr, None) is not None: self._starts.remove(addr)
  def span(self, addr: int, n: int = 1) -> tuple[int, int]:
    """(start, size) of the allocation holding [addr, addr+n); PacketError when none does."""
    with self._lock:
      i = bisect.bisect_right(self._starts, addr) - 1
      if i >= 0:
        start = self._starts[i]
        size = self._spans[start][0]
        if addr + n <= start + size: return start, size
    raise PacketError(f"address {addr:#x} (+{n} bytes) is not in memory this device allocated")
  def read(self, addr: int, n: int) -> bytes:
    self.span(addr, n)
    return ctypes.string_at(addr, n)
  def write(self, addr: int, data: bytes) -> None:
    self.span(addr, len(data))
    ctypes.memmove(addr, data, len(data))

class Launcher(Protocol):
  """Runs one dispatch: the kernel's code bytes, its buffer addresses and int arguments, work-group counts and size, and the
  images bound to its image arguments (argument index -> the decoded descriptor; those arguments' `bufs` entries are unused)."""
  def __call__(self, code: bytes, bufs: list[int], vals: list[int], groups: tuple[int, int, int], local: tuple[int, int, int],
               images: dict[int, descriptors.Image] | None = None) -> None: ...

@dataclasses.dataclass
class Shader:
  addr: int
  units: int

class Blocked(Exception):
  """A CP_WAIT_REG_MEM whose condition is not met yet: the processor stops before it and resumes there later."""

class CommandProcessor:
  """State: the register file (type-4 writes), the compute shader CP_LOAD_STATE6 loaded, the constant file."""
  def __init__(self, memory: Memory, launch: Launcher):
    self.mem, self.launch = memory, launch
    self.regs: dict[int, int] = {}
    self.shader: Shader | None = None
    self.consts = bytearray(16 * 1024)   # 1024 vec4 constants
    self.textures: list[list[int]] = []   # TEX_CONST descriptors (SB6_CS_TEX constants), read images
    self.samplers: list[list[int]] = []   # TEX_SAMP descriptors (SB6_CS_TEX shader state)
    self.ibos: list[list[int]] = []       # storage image descriptors (ST6_IBO of SB6_CS_SHADER), written images
    self.loaded_from: dict[str, int] = {}  # "texture"/"sampler"/"IBO" -> the address that state was loaded from
    self.executed: list[str] = []        # packet names run, newest last (tests and fault reports read it)

  def reg(self, r: int, offset: int) -> int:
    if r not in self.regs: raise PacketError(f"byte {offset}: CP_EXEC_CS before {regs.NAMES.get(r, hex(r))} was written")
    return self.regs[r]

  def run(self, words: list[int], base: int = 0) -> int:
    """Runs packets from `words` (byte offsets in messages start at `base`); returns how many words were consumed, fewer
    than all when a wait is not satisfied yet (resume from there)."""
    i = 0
    while i < len(words):
      off = base + 4 * i
      h = pm4.decode_header(words[i], off)
      if i + 1 + h.count > len(words):
        raise PacketError(f"byte {off}: {self._name(h)} says {h.count} dwords follow, only {len(words) - i - 1} were submitted")
      body = words[i + 1:i + 1 + h.count]
      try: self.packet(h, body, off)
      except Blocked: return i
      i += 1 + h.count
    return i

  def _name(self, h: pm4.Header) -> str:
    return f"type-4 write of {regs.NAMES.get(h.code, hex(h.code))}" if h.kind == 4 else pm4.OPCODE_NAMES.get(h.code, f"opcode {h.code:#x}")

  def packet(self, h: pm4.Header, body: list[int], off: int) -> None:
    if h.kind == 4:
      if h.count == 0: raise PacketError(f"byte {off}: a type-4 packet writing no registers")
      for k, v in enumerate(body): self.regs[h.code + k] = v
      self.executed.append("PKT4")
      return
    op, name = h.code, pm4.OPCODE_NAMES.get(h.code)
    if name is None: raise PacketError(f"byte {off}: unknown type-7 opcode {op:#x}")
    want = {pm4.CP_WAIT_FOR_IDLE: 0, pm4.CP_SET_MARKER: 1, pm4.CP_LOAD_STATE6_FRAG: 3, pm4.CP_EXEC_CS: 4, pm4.CP_EVENT_WRITE: 4,
            pm4.CP_WAIT_REG_MEM: 6, pm4.CP_MEMCPY: 5}.get(op)
    if want is not None and h.count != want: raise PacketError(f"byte {off}: {name} has {h.count} dwords, expected {want}")
    a64 = lambda k: body[k] | body[k + 1] << 32  # noqa: E731
    if op in (pm4.CP_NOP, pm4.CP_WAIT_FOR_IDLE, pm4.CP_WAIT_FOR_ME): pass   # one packet at a time: everything before is done
    elif op == pm4.CP_SET_MARKER:
      if body[0] & 0xF != pm4.RM6_COMPUTE: raise PacketError(f"byte {off}: CP_SET_MARKER mode {body[0]:#x}; this processor runs RM6_COMPUTE (8) only")
    elif op == pm4.CP_LOAD_STATE6_FRAG: self.load_state(body[0], a64(1), off)
    elif op == pm4.CP_EXEC_CS: self.exec_cs((body[1], body[2], body[3]), off)
    elif op == pm4.CP_EVENT_WRITE:
      event, addr = body[0] & 0xFF, a64(1)
      if event != pm4.CACHE_FLUSH_TS: raise PacketError(f"byte {off}: CP_EVENT_WRITE event {event:#x}; this processor handles CACHE_FLUSH_TS (0x4)")
      if body[0] >> pm4.EVENT_TIMESTAMP_BIT & 1: self.mem.write(addr, struct.pack("<Q", time.perf_counter_ns()))
      else: self.mem.write(addr, struct.pack("<I", body[3]))
    elif op == pm4.CP_MEM_WRITE:
      if h.count < 3: raise PacketError(f"byte {off}: CP_MEM_WRITE with {h.count} dwords: an address and at least one value")
      self.mem.write(a64(0), struct.pack(f"<{h.count - 2}I", *body[2:]))
    elif op == pm4.CP_WAIT_REG_MEM:
      fn, addr, ref, mask = body[0] & 7, a64(1), body[3], body[4]
      if not body[0] & pm4.POLL_MEMORY: raise PacketError(f"byte {off}: CP_WAIT_REG_MEM on a register; this processor polls memory only")
      v = struct.unpack("<I", self.mem.read(addr, 4))[0] & mask
      ok = {0: True, 1: v < ref, 2: v <= ref, 3: v == ref, 4: v != ref, 5: v >= ref, 6: v > ref}.get(fn)
      if ok is None: raise PacketError(f"byte {off}: CP_WAIT_REG_MEM function {fn} is not one of 0..6")
      if not ok: raise Blocked
    elif op == pm4.CP_MEMCPY:
      n, src, dst = 4 * body[0], a64(1), a64(3)
      self.mem.write(dst, self.mem.read(src, n))
    else: raise PacketError(f"byte {off}: {name} is not handled by this processor")
    self.executed.append(name)

  def load_state(self, dw0: int, addr: int, off: int) -> None:
    dst, st, src, block, units = dw0 & 0x3FFF, dw0 >> 14 & 3, dw0 >> 16 & 3, dw0 >> 18 & 0xF, dw0 >> 22
    if src != pm4.SS6_INDIRECT: raise PacketError(f"byte {off}: CP_LOAD_STATE6_FRAG state source {src}; this processor loads SS6_INDIRECT (2) only")
    if units == 0: raise PacketError(f"byte {off}: CP_LOAD_STATE6_FRAG of 0 units")
    if block == pm4.SB6_CS_TEX and st in (pm4.ST6_CONSTANTS, pm4.ST6_SHADER):
      n = descriptors.TEX_DWORDS if st == pm4.ST6_CONSTANTS else descriptors.SAMP_DWORDS
      words = list(struct.unpack(f"<{n * units}I", self.mem.read(addr, 4 * n * units)))
      state = [words[k:k + n] for k in range(0, len(words), n)]
      if st == pm4.ST6_CONSTANTS: self.textures = state
      else: self.samplers = state
      self.loaded_from["texture" if st == pm4.ST6_CONSTANTS else "sampler"] = addr
      return
    if block != pm4.SB6_CS_SHADER: raise PacketError(f"byte {off}: CP_LOAD_STATE6_FRAG state block {block:#x}; compute loads SB6_CS_SHADER (0xd) and SB6_CS_TEX (0x5)")
    if st == pm4.ST6_IBO:
      words = list(struct.unpack(f"<{descriptors.TEX_DWORDS * units}I", self.mem.read(addr, 4 * descriptors.TEX_DWORDS * units)))
      self.ibos = [words[k:k + descriptors.TEX_DWORDS] for k in range(0, len(words), descriptors.TEX_DWORDS)]
      self.loaded_from["IBO"] = addr
      return
    if st == pm4.ST6_SHADER:
      self.mem.span(addr, 128 * units)
      self.shader = Shader(addr, units)
    elif st == pm4.ST6_CONSTANTS:
      if 16 * (dst + units) > len(self.consts): raise PacketError(f"byte {off}: constants {dst}..{dst + units} past the 1024-vec4 constant file")
      self.consts[16 * dst:16 * (dst + units)] = self.mem.read(addr, 16 * units)
    else: raise PacketError(f"byte {off}: CP_LOAD_STATE6_FRAG state type {st} for SB6_CS_SHADER (0: shader, 1: constants, 3: IBO)")

  def exec_cs(self, groups: tuple[int, int, int], off: int) -> None:
    if self.shader is None: raise PacketError(f"byte {off}: CP_EXEC_CS before a shader was loaded (CP_LOAD_STATE6_FRAG ST6_SHADER)")
    obj = self.reg(regs.SP_CS_OBJ_START, off) | self.reg(regs.SP_CS_OBJ_START + 1, off) << 32
    if obj != self.shader.addr: raise PacketError(f"byte {off}: SP_CS_OBJ_START {obj:#x} is not the loaded shader {self.shader.addr:#x}")
    if not self.reg(regs.SP_CS_CONFIG, off) & regs.SP_CS_CONFIG_ENABLED: raise PacketError(f"byte {off}: CP_EXEC_CS with SP_CS_CONFIG.ENABLED clear")
    instrlen = self.reg(regs.SP_CS_INSTRLEN, off)
    if not 0 < 8 * instrlen <= 128 * self.shader.units:
      raise PacketError(f"byte {off}: SP_CS_INSTRLEN {instrlen} instructions does not fit the {self.shader.units} loaded 128-byte units")
    local = regs.local_of(self.reg(regs.HLSQ_CS_NDRANGE_0, off))
    glob = tuple(self.reg(regs.HLSQ_CS_NDRANGE_0 + k, off) for k in (1, 3, 5))
    if any(g == 0 for g in groups) or tuple(g * n for g, n in zip(groups, local)) != glob:
      raise PacketError(f"byte {off}: CP_EXEC_CS of {groups} groups of {local} items, but HLSQ_CS_NDRANGE says {glob} items")
    code = self.mem.read(self.shader.addr, 8 * instrlen)
    try: name, nbufs, nvars = signature(code.rstrip(b"\0").decode())
    except (UnicodeDecodeError, ValueError) as e: raise PacketError(f"byte {off}: the shader at {obj:#x} is not a kernel this processor runs: {e}") from e
    if (self.reg(regs.HLSQ_CS_CNTL, off) & 0xFF) * 4 * 16 < 8 * nbufs + 4 * nvars:
      raise PacketError(f"byte {off}: HLSQ_CS_CNTL.CONSTLEN is smaller than kernel {name}'s {nbufs} buffer and {nvars} int arguments")
    bufs = list(struct.unpack_from(f"<{nbufs}Q", self.consts, 0))
    vals = list(struct.unpack_from(f"<{nvars}i", self.consts, 8 * nbufs))
    images = self.bind_images(image_args(code.rstrip(b"\0").decode()), name, off)
    for k, b in enumerate(bufs):
      if k not in images: self.mem.span(b)   # every buffer argument must point into device memory
    if images: self.launch(code, bufs, vals, groups, local, images)
    else: self.launch(code, bufs, vals, groups, local)

  def check_bases(self, nread: int, nwrite: int, name: str, off: int) -> None:
    """The registers the shader finds its descriptors through must point where they were loaded from, with the counts."""
    wanted = [("texture", regs.SP_CS_TEX_CONST, nread), ("sampler", regs.SP_CS_TEX_SAMP, 1 if nread else 0), ("IBO", regs.SP_CS_IBO, nwrite)]
    for kind, r, n in wanted:
      if n == 0: continue
      at = self.reg(r, off) | self.reg(r + 1, off) << 32
      if at != self.loaded_from.get(kind):
        raise PacketError(f"byte {off}: kernel {name}: {regs.NAMES[r][:-3]} is {at:#x}, but its {kind} descriptors were loaded from "
                          f"{self.loaded_from.get(kind, 0):#x}")
    cfg = self.reg(regs.SP_CS_CONFIG, off)
    counts = (cfg >> 9 & 0xFF, cfg >> 17 & 0x1F, cfg >> 22 & 0x7F, self.reg(regs.SP_CS_TEX_COUNT, off), self.reg(regs.SP_CS_IBO_COUNT, off))
    if counts != (nread, 1 if nread else 0, nwrite, nread, nwrite):
      raise PacketError(f"byte {off}: kernel {name} reads {nread} and writes {nwrite} images, but SP_CS_CONFIG NTEX/NSAMP/NIBO and "
                        f"SP_CS_TEX_COUNT/IBO_COUNT say {counts}")

  def bind_images(self, args: tuple, name: str, off: int) -> dict[int, descriptors.Image]:
    """The kernel's image arguments bound to the loaded descriptors: its read images to the textures in order, its written
    ones to the IBOs; each must describe the image the kernel declares, in device memory."""
    if not args: return {}
    reads, writes = [a for a in args if not a.written], [a for a in args if a.written]
    if len(self.textures) < len(reads) or len(self.ibos) < len(writes):
      raise PacketError(f"byte {off}: kernel {name} reads {len(reads)} and writes {len(writes)} images; {len(self.textures)} texture and "
                        f"{len(self.ibos)} IBO descriptors are loaded")
    if reads:
      if not self.samplers: raise PacketError(f"byte {off}: kernel {name} reads images but no sampler is loaded")
      descriptors.check_sampler(self.samplers[0], f"byte {off}: sampler 0")
    self.check_bases(len(reads), len(writes), name, off)
    out = {}
    for kind, group, state in (("texture", reads, self.textures), ("IBO", writes, self.ibos)):
      for k, a in enumerate(group):
        im = descriptors.decode_tex_const(state[k], f"byte {off}: {kind} {k}")
        if (im.height, im.width, im.half) != (a.height, a.width, a.half):
          raise PacketError(f"byte {off}: {kind} {k} is a {im.height}x{im.width} {'half' if im.half else 'float'} image; kernel {name}'s "
                            f"argument {a.arg} is {a.height}x{a.width} {'half' if a.half else 'float'}")
        self.mem.span(im.base, im.pitch * im.height)
        out[a.arg] = im
    return out
