"""QMD golden tests: every field the plugin sets is checked at the bit range NVIDIA's public headers give for it.

HEADERS below is an excerpt of open-gpu-doc classes/compute/clc7c0qmd.h, clcbc0qmd.h and clcdc0qmd.h (the `#define NAME MW(hi:lo)`
lines of the fields this plugin uses, as the headers write them). The test parses those ranges with its own setter and builds the
expected QMD from values worked out here from the program data, independently of plugin_nv.qmd's own field tables; the two must
agree bit for bit (no stray bits either)."""
from __future__ import annotations
import re
import pytest
from plugin_nv.prep import NVProgramData
from plugin_nv.qmd import ARCHS, QMD, address_fields, address_slot, arch_info, build_qmd

HEADERS = """
# clc7c0qmd.h
NVC7C0_QMDV03_00_SM_GLOBAL_CACHING_ENABLE MW(134:134)
NVC7C0_QMDV03_00_IS_QUEUE MW(136:136)
NVC7C0_QMDV03_00_INVALIDATE_TEXTURE_HEADER_CACHE MW(186:186)
NVC7C0_QMDV03_00_INVALIDATE_TEXTURE_SAMPLER_CACHE MW(187:187)
NVC7C0_QMDV03_00_INVALIDATE_TEXTURE_DATA_CACHE MW(188:188)
NVC7C0_QMDV03_00_INVALIDATE_SHADER_DATA_CACHE MW(189:189)
NVC7C0_QMDV03_00_INVALIDATE_INSTRUCTION_CACHE MW(190:190)
NVC7C0_QMDV03_00_INVALIDATE_SHADER_CONSTANT_CACHE MW(191:191)
NVC7C0_QMDV03_00_CWD_MEMBAR_TYPE MW(369:368)
NVC7C0_QMDV03_00_API_VISIBLE_CALL_LIMIT MW(378:378)
NVC7C0_QMDV03_00_SAMPLER_INDEX MW(382:382)
NVC7C0_QMDV03_00_CTA_RASTER_WIDTH MW(415:384)
NVC7C0_QMDV03_00_CTA_RASTER_HEIGHT MW(431:416)
NVC7C0_QMDV03_00_CTA_RASTER_DEPTH MW(463:448)
NVC7C0_QMDV03_00_SHARED_MEMORY_SIZE MW(561:544)
NVC7C0_QMDV03_00_MIN_SM_CONFIG_SHARED_MEM_SIZE MW(567:562)
NVC7C0_QMDV03_00_MAX_SM_CONFIG_SHARED_MEM_SIZE MW(574:569)
NVC7C0_QMDV03_00_QMD_VERSION MW(579:576)
NVC7C0_QMDV03_00_QMD_MAJOR_VERSION MW(583:580)
NVC7C0_QMDV03_00_CTA_THREAD_DIMENSION0 MW(607:592)
NVC7C0_QMDV03_00_CTA_THREAD_DIMENSION1 MW(623:608)
NVC7C0_QMDV03_00_CTA_THREAD_DIMENSION2 MW(639:624)
NVC7C0_QMDV03_00_CONSTANT_BUFFER_VALID(i) MW((640+(i)*1):(640+(i)*1))
NVC7C0_QMDV03_00_REGISTER_COUNT_V MW(656:648)
NVC7C0_QMDV03_00_TARGET_SM_CONFIG_SHARED_MEM_SIZE MW(662:657)
NVC7C0_QMDV03_00_SHARED_ALLOCATION_ENABLE MW(663:663)
NVC7C0_QMDV03_00_SHADER_LOCAL_MEMORY_LOW_SIZE MW(759:736)
NVC7C0_QMDV03_00_BARRIER_COUNT MW(767:763)
NVC7C0_QMDV03_00_CONSTANT_BUFFER_ADDR_LOWER(i) MW((1055+(i)*64):(1024+(i)*64))
NVC7C0_QMDV03_00_CONSTANT_BUFFER_ADDR_UPPER(i) MW((1072+(i)*64):(1056+(i)*64))
NVC7C0_QMDV03_00_CONSTANT_BUFFER_SIZE_SHIFTED4(i) MW((1087+(i)*64):(1075+(i)*64))
NVC7C0_QMDV03_00_PROGRAM_ADDRESS_LOWER MW(1567:1536)
NVC7C0_QMDV03_00_PROGRAM_ADDRESS_UPPER MW(1584:1568)
NVC7C0_QMDV03_00_SHADER_LOCAL_MEMORY_HIGH_SIZE MW(1623:1600)
NVC7C0_QMDV03_00_SASS_VERSION MW(1663:1656)
# clcbc0qmd.h
NVCBC0_QMDV04_00_QMD_TYPE MW(25:23)
NVCBC0_QMDV04_00_CONSTANT_BUFFER_VALID(i) MW((416+(i)*4):(416+(i)*4))
NVCBC0_QMDV04_00_SHADER_LOCAL_MEMORY_LOW_SIZE MW(535:512)
NVCBC0_QMDV04_00_SASS_VERSION MW(543:536)
NVCBC0_QMDV04_00_SHADER_LOCAL_MEMORY_HIGH_SIZE MW(567:544)
NVCBC0_QMDV04_00_API_VISIBLE_CALL_LIMIT MW(568:568)
NVCBC0_QMDV04_00_SAMPLER_INDEX MW(569:569)
NVCBC0_QMDV04_00_QMD_MINOR_VERSION MW(579:576)
NVCBC0_QMDV04_00_QMD_MAJOR_VERSION MW(583:580)
NVCBC0_QMDV04_00_SHARED_MEMORY_SIZE MW(601:584)
NVCBC0_QMDV04_00_INVALIDATE_TEXTURE_HEADER_CACHE MW(602:602)
NVCBC0_QMDV04_00_INVALIDATE_TEXTURE_SAMPLER_CACHE MW(603:603)
NVCBC0_QMDV04_00_INVALIDATE_TEXTURE_DATA_CACHE MW(604:604)
NVCBC0_QMDV04_00_INVALIDATE_SHADER_DATA_CACHE MW(605:605)
NVCBC0_QMDV04_00_INVALIDATE_INSTRUCTION_CACHE MW(606:606)
NVCBC0_QMDV04_00_INVALIDATE_SHADER_CONSTANT_CACHE MW(607:607)
NVCBC0_QMDV04_00_MIN_SM_CONFIG_SHARED_MEM_SIZE MW(613:608)
NVCBC0_QMDV04_00_MAX_SM_CONFIG_SHARED_MEM_SIZE MW(619:614)
NVCBC0_QMDV04_00_TARGET_SM_CONFIG_SHARED_MEM_SIZE MW(625:620)
NVCBC0_QMDV04_00_SHARED_ALLOCATION_ENABLE MW(626:626)
NVCBC0_QMDV04_00_GRID_WIDTH MW(1055:1024)
NVCBC0_QMDV04_00_GRID_HEIGHT MW(1071:1056)
NVCBC0_QMDV04_00_GRID_DEPTH MW(1103:1088)
NVCBC0_QMDV04_00_CWD_MEMBAR_TYPE MW(1137:1136)
NVCBC0_QMDV04_00_CTA_THREAD_DIMENSION0 MW(1167:1152)
NVCBC0_QMDV04_00_CTA_THREAD_DIMENSION1 MW(1183:1168)
NVCBC0_QMDV04_00_CTA_THREAD_DIMENSION2 MW(1199:1184)
NVCBC0_QMDV04_00_REGISTER_COUNT MW(1208:1200)
NVCBC0_QMDV04_00_BARRIER_COUNT MW(1215:1211)
NVCBC0_QMDV04_00_PROGRAM_ADDRESS_LOWER MW(1247:1216)
NVCBC0_QMDV04_00_PROGRAM_ADDRESS_UPPER MW(1272:1248)
NVCBC0_QMDV04_00_CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(i) MW((1567+(i)*64):(1536+(i)*64))
NVCBC0_QMDV04_00_CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(i) MW((1586+(i)*64):(1568+(i)*64))
NVCBC0_QMDV04_00_CONSTANT_BUFFER_SIZE_SHIFTED4(i) MW((1599+(i)*64):(1587+(i)*64))
# clcdc0qmd.h
NVCDC0_QMDV05_00_QMD_TYPE MW(153:151)
NVCDC0_QMDV05_00_SHARED_ALLOCATION_ENABLE MW(351:351)
NVCDC0_QMDV05_00_SASS_VERSION MW(455:448)
NVCDC0_QMDV05_00_API_VISIBLE_CALL_LIMIT MW(456:456)
NVCDC0_QMDV05_00_SAMPLER_INDEX MW(457:457)
NVCDC0_QMDV05_00_QMD_MINOR_VERSION MW(467:464)
NVCDC0_QMDV05_00_QMD_MAJOR_VERSION MW(471:468)
NVCDC0_QMDV05_00_INVALIDATE_TEXTURE_HEADER_CACHE MW(472:472)
NVCDC0_QMDV05_00_INVALIDATE_TEXTURE_SAMPLER_CACHE MW(473:473)
NVCDC0_QMDV05_00_INVALIDATE_TEXTURE_DATA_CACHE MW(474:474)
NVCDC0_QMDV05_00_INVALIDATE_SHADER_DATA_CACHE MW(475:475)
NVCDC0_QMDV05_00_INVALIDATE_INSTRUCTION_CACHE MW(476:476)
NVCDC0_QMDV05_00_INVALIDATE_SHADER_CONSTANT_CACHE MW(477:477)
NVCDC0_QMDV05_00_CWD_MEMBAR_TYPE MW(625:624)
NVCDC0_QMDV05_00_PROGRAM_ADDRESS_LOWER_SHIFTED4 MW(1055:1024)
NVCDC0_QMDV05_00_PROGRAM_ADDRESS_UPPER_SHIFTED4 MW(1076:1056)
NVCDC0_QMDV05_00_CTA_THREAD_DIMENSION0 MW(1103:1088)
NVCDC0_QMDV05_00_CTA_THREAD_DIMENSION1 MW(1119:1104)
NVCDC0_QMDV05_00_CTA_THREAD_DIMENSION2 MW(1127:1120)
NVCDC0_QMDV05_00_REGISTER_COUNT MW(1136:1128)
NVCDC0_QMDV05_00_BARRIER_COUNT MW(1141:1137)
NVCDC0_QMDV05_00_SHARED_MEMORY_SIZE_SHIFTED7 MW(1162:1152)
NVCDC0_QMDV05_00_MIN_SM_CONFIG_SHARED_MEM_SIZE MW(1168:1163)
NVCDC0_QMDV05_00_MAX_SM_CONFIG_SHARED_MEM_SIZE MW(1174:1169)
NVCDC0_QMDV05_00_TARGET_SM_CONFIG_SHARED_MEM_SIZE MW(1180:1175)
NVCDC0_QMDV05_00_SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4 MW(1199:1184)
NVCDC0_QMDV05_00_SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4 MW(1215:1200)
NVCDC0_QMDV05_00_GRID_WIDTH MW(1279:1248)
NVCDC0_QMDV05_00_GRID_HEIGHT MW(1295:1280)
NVCDC0_QMDV05_00_GRID_DEPTH MW(1327:1312)
NVCDC0_QMDV05_00_CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(i) MW((1375+(i)*64):(1344+(i)*64))
NVCDC0_QMDV05_00_CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(i) MW((1394+(i)*64):(1376+(i)*64))
NVCDC0_QMDV05_00_CONSTANT_BUFFER_SIZE_SHIFTED4(i) MW((1407+(i)*64):(1395+(i)*64))
NVCDC0_QMDV05_00_CONSTANT_BUFFER_VALID(i) MW((1856+(i)*4):(1856+(i)*4))
"""

def header_fields() -> dict[tuple[int, int], dict[str, tuple[str, str]]]:
  """(major, minor) -> field name -> (hi expression, lo expression) in `i`."""
  out: dict[tuple[int, int], dict[str, tuple[str, str]]] = {}
  for line in HEADERS.splitlines():
    if not (m := re.match(r"NV[0-9A-F]{4}_QMDV(\d\d)_(\d\d)_(\w+?)(\(i\))? MW\(\(?(.+?)\)?:\(?(.+?)\)?\)$", line)): continue
    out.setdefault((int(m.group(1)), int(m.group(2))), {})[m.group(3)] = (m.group(5), m.group(6))
  return out

FIELDS = header_fields()

class Expected:
  """A QMD built from the header ranges."""
  def __init__(self, version: tuple[int, int]):
    self.f, self.bits = FIELDS[version], 0
  def set(self, name: str, value: int, i: int = 0) -> None:
    hi, lo = (eval(e, {"i": i}) for e in self.f[name])
    assert 0 <= value < 1 << (hi - lo + 1), (name, value)
    self.bits |= value << lo

def data(**kw) -> NVProgramData:
  base = dict(name="k", kernarg_size=0, kernarg_align=8, arg_offsets=(), arch="", regs=24, shared_size=4100, cbank0_offset=0x210,
              cbank0_size=0x228, local_size=20, const_banks=((2, 0x300, 0x24),))
  return NVProgramData(**{**base, **kw})

def test_header_excerpt_parses():
  assert set(FIELDS) == {(3, 0), (4, 0), (5, 0)}
  assert FIELDS[(4, 0)]["CTA_THREAD_DIMENSION0"] == ("1167", "1152")
  assert FIELDS[(3, 0)]["CONSTANT_BUFFER_ADDR_LOWER"] == ("1055+(i)*64", "1024+(i)*64")

@pytest.mark.parametrize("arch", list(ARCHS))
def test_qmd_fields_at_documented_bits(arch: str):
  d, grid, block = data(), (40000, 3, 2), (128, 2, 1)
  q = build_qmd(arch, d, grid, block)
  info = arch_info(arch)
  major = {"sm_8": 3, "sm_9": 4, "sm_1": 5}[arch[:4]]
  assert (info.qmd.major, info.qmd.minor) == (major, 0)
  e = Expected((major, 0))
  e.set("QMD_MAJOR_VERSION", major)
  e.set("API_VISIBLE_CALL_LIMIT", 1)          # _NO_CHECK
  e.set("SAMPLER_INDEX", 1)                   # _VIA_HEADER_INDEX
  e.set("CWD_MEMBAR_TYPE", 1)                 # _L1_SYSMEMBAR
  e.set("SHARED_ALLOCATION_ENABLE", 1)
  e.set("REGISTER_COUNT_V" if major == 3 else "REGISTER_COUNT", 24)
  e.set("BARRIER_COUNT", 1)
  e.set("SASS_VERSION", {"sm_80": 0x80, "sm_86": 0x86, "sm_89": 0x89, "sm_90": 0x90, "sm_100": 0xa0, "sm_120": 0xc0}[arch])
  if major == 3: e.set("SM_GLOBAL_CACHING_ENABLE", 1)
  else: e.set("QMD_TYPE", 2)                  # _GRID_CTA
  for c in ("TEXTURE_HEADER", "TEXTURE_SAMPLER", "TEXTURE_DATA", "SHADER_DATA", "INSTRUCTION", "SHADER_CONSTANT"): e.set(f"INVALIDATE_{c}_CACHE", 1)
  for name, v in zip(("CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH") if major == 3 else ("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"), grid):
    e.set(name, v)
  for k, v in enumerate(block): e.set(f"CTA_THREAD_DIMENSION{k}", v)
  # 4100 bytes of shared memory: 4352 in 256-byte units (v03/v04), 4224 = 33 << 7 on v05; the 8 KiB carve-out is 8/4+1 = 3
  if major == 5: e.set("SHARED_MEMORY_SIZE_SHIFTED7", 33)
  else: e.set("SHARED_MEMORY_SIZE", 4352)
  largest = {"sm_80": 164, "sm_86": 100, "sm_89": 100, "sm_90": 228, "sm_100": 228, "sm_120": 100}[arch]
  e.set("MIN_SM_CONFIG_SHARED_MEM_SIZE", 3)
  e.set("TARGET_SM_CONFIG_SHARED_MEM_SIZE", 3)
  e.set("MAX_SM_CONFIG_SHARED_MEM_SIZE", largest // 4 + 1)
  if major == 5: e.set("SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4", 2)   # 20 bytes per thread -> 32
  else: e.set("SHADER_LOCAL_MEMORY_LOW_SIZE", 32)
  e.set("CONSTANT_BUFFER_VALID", 1, 0)
  e.set("CONSTANT_BUFFER_SIZE_SHIFTED4", 0x230 >> 4, 0)   # bank 0: 0x228 bytes rounded to 16
  e.set("CONSTANT_BUFFER_VALID", 1, 2)
  e.set("CONSTANT_BUFFER_SIZE_SHIFTED4", 0x30 >> 4, 2)
  assert q.bits == e.bits, f"differing bits: {q.bits ^ e.bits:#x}"
  assert len(q.to_bytes()) == {3: 256, 4: 384, 5: 384}[major]

@pytest.mark.parametrize("arch", list(ARCHS))
def test_address_slots_match_header(arch: str):
  """The address fields a launch patches: program, then bank 0 and bank 2, each a LOWER dword with UPPER right above it."""
  L = arch_info(arch).qmd
  fields = address_fields(arch, data())
  major = L.major
  prog = "PROGRAM_ADDRESS_LOWER_SHIFTED4" if major == 5 else "PROGRAM_ADDRESS_LOWER"
  cb = "CONSTANT_BUFFER_ADDR_LOWER" + ("" if major == 3 else "_SHIFTED6")
  assert fields == [(prog, None), (cb, 0), (cb, 2)]
  for name, i in fields:
    dw, shift, bits = address_slot(L, name, i)
    hi, lo = (eval(x, {"i": i or 0}) for x in FIELDS[(major, 0)][name])
    uhi, ulo = (eval(x, {"i": i or 0}) for x in FIELDS[(major, 0)][name.replace("LOWER", "UPPER")])
    assert (dw * 32, ulo, bits) == (lo, hi + 1, uhi - lo + 1)
    assert shift == (4 if name.endswith("SHIFTED4") else 6 if name.endswith("SHIFTED6") else 0)

def test_qmd_rejects_what_does_not_fit():
  with pytest.raises(ValueError, match="CTA_THREAD_DIMENSION2 is 8 bits"): build_qmd("sm_120", data(), (1, 1, 1), (1, 1, 256))
  with pytest.raises(ValueError, match="carve-out"): build_qmd("sm_86", data(shared_size=101 * 1024), (1, 1, 1), (1, 1, 1))
  with pytest.raises(ValueError, match="sm_70"): arch_info("sm_70")
  q = QMD(arch_info("sm_90").qmd)
  q.set("GRID_WIDTH", 0xFFFFFFFF)
  assert q.get("GRID_WIDTH") == 0xFFFFFFFF and q.words()[32] == 0xFFFFFFFF
