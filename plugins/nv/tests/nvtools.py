"""Test helpers: find the CUDA tools (ptxas, cuobjdump), build cubins from PTX, and read `cuobjdump -elf` listings.

A tool is looked for on PATH, then under /usr/local/cuda*/bin (newest first), then in the pip wheels that ship it
(`nvidia-cuda-nvcc` has ptxas, `nvidia-cuda-cuobjdump` has cuobjdump: site-packages/nvidia/cu13/bin, or nvidia/<pkg>/bin for
CUDA 12 wheels). Missing: the test is skipped, except under CI=true, where it fails with what to install."""
from __future__ import annotations
import functools, glob, importlib.util, os, re, shutil, subprocess, tempfile
from pathlib import Path
from core.testing.helpers import missing_tool

WHEELS = {"ptxas": "nvidia-cuda-nvcc", "cuobjdump": "nvidia-cuda-cuobjdump", "nvdisasm": "nvidia-cuda-nvdisasm"}

@functools.cache
def find_tool(name: str) -> str | None:
  if found := shutil.which(name): return found
  for d in sorted(glob.glob("/usr/local/cuda*/bin"), reverse=True):
    if os.access(p := os.path.join(d, name), os.X_OK): return p
  spec = importlib.util.find_spec("nvidia")
  for root in (spec.submodule_search_locations or []) if spec is not None else []:
    for p in sorted(glob.glob(os.path.join(root, "*", "bin", name)), reverse=True):
      if os.access(p, os.X_OK): return p
  return None

def require(name: str) -> str:
  if (path := find_tool(name)) is not None: return path
  msg = f"{name} not found on PATH, under /usr/local/cuda*/bin or in a pip wheel: pip install {WHEELS[name]} (or ./plugins/nv[testing])"
  missing_tool(msg)

@functools.cache
def ptx_cubin(ptx: str, arch: str) -> bytes:
  """The cubin ptxas makes of `ptx` for `arch` ("sm_90")."""
  ptxas = require("ptxas")
  with tempfile.TemporaryDirectory() as d:
    src, out = Path(d, "k.ptx"), Path(d, "k.cubin")
    src.write_text(ptx)
    subprocess.run([ptxas, f"-arch={arch}", str(src), "-o", str(out)], check=True, capture_output=True, text=True)
    return out.read_bytes()

@functools.cache
def cuobjdump_elf(cubin: bytes) -> str:
  tool = require("cuobjdump")
  with tempfile.TemporaryDirectory() as d:
    (p := Path(d, "k.cubin")).write_bytes(cubin)
    return subprocess.run([tool, "-elf", str(p)], check=True, capture_output=True, text=True).stdout

class ElfListing:
  """What `cuobjdump -elf` says about a cubin: sm, section sizes, each .nv.info* section's records (attribute, format, value
  text), each relocation section's rows, each .text section's lmem/smem line and words, each constant bank's words."""
  def __init__(self, text: str) -> None:
    self.text = text
    m = re.search(r"sm=(\d+).*flags=(0x[0-9a-f]+)", text)
    assert m, text[:500]
    self.sm, self.flags = int(m.group(1)), int(m.group(2), 16)
    self.sizes: dict[str, int] = {}
    for row in re.finditer(r"^\s*[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s+[0-9a-f]+\s+[0-9a-f]+\s+\w+\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+(\S+)$", text, re.M):
      self.sizes[row.group(2)] = int(row.group(1), 16)
    self.records: dict[str, list[tuple[str, str, str]]] = {}
    self.relocs: dict[str, list[tuple[int, str, str]]] = {}
    self.words: dict[str, list[int]] = {}
    self.text_info: dict[str, tuple[int, int]] = {}
    section = None
    for line in text.splitlines():
      s = line.strip()
      if re.fullmatch(r"\.section \S+(\s+RELA?)?", s): section = s.split()[1]
      elif re.fullmatch(r"\.[\w.$]+", s) and not s.startswith(".section"): section = s
      elif section is None: continue
      elif m := re.fullmatch(r"Attribute:\s+(\w+)", s): self.records.setdefault(section, []).append((m.group(1), "", ""))
      elif m := re.fullmatch(r"Format:\s+(\w+)", s): self.records[section][-1] = (self.records[section][-1][0], m.group(1), "")
      elif m := re.fullmatch(r"Value:\s*(.*)", s): self.records[section][-1] = self.records[section][-1][:2] + (m.group(1),)
      elif section.startswith(".nv.info") and s and not s.startswith("<0x") and section in self.records:
        self.records[section][-1] = self.records[section][-1][:2] + (self.records[section][-1][2] + " " + s,)
      elif (m := re.fullmatch(r"(0x[0-9a-f]+)\s+(\S+)\s+(R_CUDA_\w+)(\s+\S+)?", s)) and section.startswith(".rel"):
        self.relocs.setdefault(section, []).append((int(m.group(1), 16), m.group(2), m.group(3)))
      elif m := re.fullmatch(r"lmem=(\d+)\s+smem=(\d+)", s): self.text_info[section] = (int(m.group(1)), int(m.group(2)))
      elif re.fullmatch(r"(0x[0-9a-f]{8}\s*)+", s): self.words.setdefault(section, []).extend(int(w, 16) for w in s.split())

  def attrs(self, section: str, name: str) -> list[str]:
    return [v for a, _, v in self.records.get(section, []) if a == name]

  def ints(self, section: str, name: str) -> list[list[int]]:
    """The hex numbers in each value of attribute `name` (e.g. PARAM_CBANK '0xe 0x140210' -> [0xe, 0x140210])."""
    return [[int(x, 16) for x in re.findall(r"0x[0-9a-f]+", v)] for v in self.attrs(section, name)]
