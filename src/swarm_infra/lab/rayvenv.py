"""Ray's virtualenv built once per machine and laid under lab nodes as a read-only layer.

Installing Ray (with its tune, data and serve extras) with pip takes minutes per node, and
every fresh lab node paid it again. So the lab builds the virtualenv once, the way a node
would (the image's own Python 3.11, ``python3 -m venv`` and pip from Debian's
``/usr/share/python-wheels``, the requirements from the lab's wheelhouse, no network), at
the node path the fleet's layout names (``NodeState.layout.files.ray_venv``), and caches it
in ``$SWARM_LAB_CACHE/ray-venv/<key>/layer``, keyed by the requirements, the venv path and
the base image, like the wheelhouse. A Ray node's overlay then has that layer as a second
read-only lower directory above the image: the product's converge finds its requirements
met (the Ansible role's ``swarm_requirements_missing``, pyinfra's ``pip_requirements``) and
skips pip. Nodes cannot change the shared copy: overlayfs copies a file up into the node's
own upper directory before it is written. This is a lab shortcut only; ``swarm lab up
--unseeded NODE`` leaves a node to install Ray with pip itself, which is the product's path.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .system import LabError, run

# Bump when the build below changes, so cached virtualenvs are rebuilt.
RECIPE_VERSION = "1"
# Where Debian keeps the wheels its ensurepip (python3-venv) installs into a new virtualenv:
# the same pip and setuptools a node's `python3 -m venv` gets.
DEBIAN_WHEELS = Path("/usr/share/python-wheels")
BUILD_TIMEOUT_S = 1800


def venv_key(image: Path, venv: str, requirements: Sequence[str]) -> str:
    """12 hex digits: the requirements (in order), the venv's path on the node, the base
    image (its Python) and the recipe."""
    recipe = json.dumps([list(requirements), venv, image.parent.name, RECIPE_VERSION])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def bootstrap_wheels() -> list[Path]:
    """pip's and setuptools' wheels for the new virtualenv: Debian's (what ensurepip would
    install on a node), else the ones this Python's ensurepip bundles."""
    found = []
    for project in ("pip", "setuptools"):
        candidates = sorted(DEBIAN_WHEELS.glob(f"{project}-*.whl"))
        if not candidates:
            import ensurepip

            candidates = sorted((Path(ensurepip.__file__).parent / "_bundled").glob(f"{project}-*.whl"))
        if not candidates:
            raise LabError(
                f"no {project} wheel in {DEBIAN_WHEELS} or ensurepip (apt-get install python3-pip-whl)"
            )
        found.append(candidates[-1])
    return found


def _mkdirs_like(image: Path, layer: Path, rel: str) -> None:
    """``layer/rel`` with each directory's mode and owner as in the image (above the image in
    an overlay, a layer's directory attributes win); directories the image lacks get 0755."""
    current_i, current_l = image, layer
    for part in Path(rel).parts:
        current_i, current_l = current_i / part, current_l / part
        current_l.mkdir(exist_ok=True)
        st = current_i.stat() if current_i.is_dir() else None
        os.chmod(current_l, stat.S_IMODE(st.st_mode) if st else 0o755)
        os.chown(current_l, st.st_uid if st else 0, st.st_gid if st else 0)


# Runs in the image's root (chroot): the venv as a node's `python3 -m venv` makes it, then the
# requirements from the wheelhouse only. $1 venv, $2 pip wheel, $3 setuptools wheel, then the
# requirements.
BUILD_SCRIPT = r"""
set -eu
venv=$1 pip_whl=$2 setuptools_whl=$3
shift 3
python3 -m venv --without-pip "$venv"
"$venv/bin/python" "$pip_whl/pip" install --quiet --no-index --disable-pip-version-check \
    --no-cache-dir "$pip_whl" "$setuptools_whl"
"$venv/bin/pip" install --quiet --no-index --disable-pip-version-check --no-cache-dir \
    --find-links /mnt/wheelhouse "$@"
"""

# In a private mount namespace: the image as an overlay's lower directory (never written),
# the wheelhouse and bootstrap wheels read-only, /proc and /dev for Python; then chroot.
MOUNT_SCRIPT = r"""
set -eu
image=$1 upper=$2 work=$3 root=$4 wheels=$5 boot=$6
shift 6
mount -t overlay overlay -o "lowerdir=$image,upperdir=$upper,workdir=$work" "$root"
mkdir -p "$root/mnt/wheelhouse" "$root/mnt/bootstrap"
mount --bind "$wheels" "$root/mnt/wheelhouse"
mount -o remount,bind,ro "$root/mnt/wheelhouse"
mount --bind "$boot" "$root/mnt/bootstrap"
mount -o remount,bind,ro "$root/mnt/bootstrap"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    /bin/sh /mnt/bootstrap/build.sh "$@"
"""


def ensure_ray_venv(
    cache: Path,
    image: Path,
    wheelhouse: Path,
    venv: str,
    requirements: Sequence[str],
    log: Callable[[str], None] = print,
) -> Path:
    """The layer directory (a root filesystem holding only ``venv`` and its parents) with
    ``requirements`` installed in a virtualenv at ``venv``, built unless cached.

    Concurrent callers wait on a lock file; a half-built layer is never used (built under a
    temporary name, renamed when complete). Raises :class:`LabError` when the build fails.
    """
    key = venv_key(image, venv, requirements)
    final = cache / key
    if (final / ".complete").exists():
        log(f"venv   Ray virtualenv {key}: cached at {final}")
        return final / "layer"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".complete").exists():
            return final / "layer"
        building = cache / f".building-{key}"
        shutil.rmtree(building, ignore_errors=True)
        upper, work, root, boot = (building / d for d in ("upper", "work", "root", "bootstrap"))
        for d in (upper, work, root, boot):
            d.mkdir(parents=True)
        pip_whl, setuptools_whl = bootstrap_wheels()
        for whl in (pip_whl, setuptools_whl):
            shutil.copy2(whl, boot / whl.name)
        log(f"venv   Ray virtualenv {key}: building {venv} from the wheelhouse (once)")
        started = time.monotonic()
        (boot / "build.sh").write_text(BUILD_SCRIPT)
        proc = run(
            ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", MOUNT_SCRIPT, "mount",
             str(image), str(upper), str(work), str(root), str(wheelhouse), str(boot), venv,
             f"/mnt/bootstrap/{pip_whl.name}", f"/mnt/bootstrap/{setuptools_whl.name}", *requirements],
            check=False,
            timeout=BUILD_TIMEOUT_S,
        )  # fmt: skip
        (building / "build.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise LabError(f"building Ray's virtualenv failed (log: {building / 'build.log'}):\n{tail}")
        rel = venv.strip("/")
        layer = building / "layer"
        layer.mkdir()
        _mkdirs_like(image, layer, str(Path(rel).parent))
        os.rename(upper / rel, layer / rel)
        for d in (upper, work, root, boot):
            shutil.rmtree(d, ignore_errors=True)
        (building / ".complete").write_text(
            json.dumps({"venv": venv, "requirements": list(requirements)}) + "\n"
        )
        building.rename(final)
        log(f"venv   Ray virtualenv {key}: built in {time.monotonic() - started:.0f} s")
    return final / "layer"
