"""Downloads into core's cache folder: written through a temporary file (never a half file), re-used when cached."""
from __future__ import annotations
import gzip, hashlib, http.client, os, pathlib, shutil, sys, tempfile, time, urllib.error, urllib.request
from typing import IO
from core.helpers import cache_dir, fmt_bytes

class DownloadError(OSError):
  """A download that failed (an HTTP error status, a broken connection, fewer bytes than announced)."""

def _progress(out: IO[str], name: str, done: int, total: int | None, t0: float) -> None:
  rate = f"{fmt_bytes(done / max(time.perf_counter() - t0, 1e-9))}/s"
  if total:
    filled = 30 * done // total
    out.write(f"\r{name}: {100 * done // total:3d}% |{'#' * filled}{'.' * (30 - filled)}| {fmt_bytes(done)}/{fmt_bytes(total)} {rate}")
  else: out.write(f"\r{name}: {fmt_bytes(done)} {rate}")
  out.flush()

def fetch(url: str, name: str | os.PathLike | None = None, subdir: str | None = None, gunzip: bool = False, allow_caching: bool = True,
          progress: bool | None = None, timeout: float = 60.0) -> pathlib.Path:
  """The path of `url`'s content in cache_dir()/downloads, downloading it unless it is there already.

  name: the cached file's name (default: a hash of the url; an absolute path is used as it is); gunzip: store the
  decompressed content; allow_caching=False downloads again even when cached; progress: a bar on stderr (default: when
  stderr is a terminal). A local path (no scheme) is returned as it is."""
  if "://" not in url: return pathlib.Path(url)
  folder = cache_dir() / "downloads" / (subdir or "")
  if name is not None and os.path.isabs(name): path = pathlib.Path(name)
  else: path = folder / (name or hashlib.md5(url.encode() + (b"#gunzip" if gunzip else b"")).hexdigest())
  if allow_caching and path.is_file(): return path
  path.parent.mkdir(parents=True, exist_ok=True)
  show = sys.stderr.isatty() if progress is None else progress
  try: resp = urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "core"}), timeout=timeout)
  except urllib.error.HTTPError as e: raise DownloadError(f"fetch {url}: the server answered HTTP {e.code} {e.reason}") from None
  except urllib.error.URLError as e: raise DownloadError(f"fetch {url}: can't connect ({e.reason})") from None
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
  try:
    with resp, os.fdopen(fd, "wb") as f:
      total = int(resp.headers["Content-Length"]) if resp.headers.get("Content-Length", "").isdigit() else None
      done, t0 = 0, time.perf_counter()
      try:
        while (chunk := resp.read(1 << 20)):
          f.write(chunk)
          done += len(chunk)
          if show: _progress(sys.stderr, path.name, done, total, t0)
      except (http.client.HTTPException, ConnectionError, TimeoutError) as e:
        raise DownloadError(f"fetch {url}: the server sent {done} of {total or 'an unknown number of'} bytes, then "
                            f"{type(e).__name__}: {e}") from None
      if show: sys.stderr.write("\n")
      if total is not None and done != total: raise DownloadError(f"fetch {url}: the server sent {done} of {total} bytes")
    if gunzip:
      with gzip.open(tmp, "rb") as src, tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".gunzip", delete=False) as dst:
        try: shutil.copyfileobj(src, dst)
        except (OSError, EOFError) as e:
          os.unlink(dst.name)
          raise DownloadError(f"fetch {url}: gunzip=True but the content is not valid gzip ({e})") from None
      os.replace(dst.name, tmp)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp): os.unlink(tmp)
    raise
  return path
