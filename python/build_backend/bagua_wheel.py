"""A PEP 517 backend that needs nothing outside the standard library: the wheel holds the bagua package and,
when a built library is found (BAGUA_BUILD_DIR, else ../build), a copy of libbagua.so.0 next to it, so the
installed package finds its library without BAGUA_LIBRARY."""

import base64
import hashlib
import os
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "bagua"


def _version():
    scope = {}
    with open(os.path.join(HERE, NAME, "_version.py")) as f:
        exec(f.read(), scope)
    return scope["__version__"]


def _built_library():
    build_dir = os.environ.get("BAGUA_BUILD_DIR", os.path.join(HERE, "..", "build"))
    path = os.path.join(build_dir, "lib", "libbagua.so.0")
    return os.path.realpath(path) if os.path.exists(path) else None


def _package_files():
    """(path in the wheel, path on disk) of every module, and the library when there is one."""
    files = []
    for folder, dirs, names in os.walk(os.path.join(HERE, NAME)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                files.append((os.path.relpath(path, HERE), path))
    library = _built_library()
    if library:
        files.append((f"{NAME}/libbagua.so.0", library))
    return files


def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
            "Summary: Python binding of libbagua: collectives and BAGUA's system relaxations\n"
            "Requires-Python: >=3.9\nLicense: Apache-2.0\n")


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_name = f"{NAME}-{version}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as wheel:
        def add(arcname, data):
            wheel.writestr(arcname, data)
            records.append(f"{arcname},{_digest(data)},{len(data)}")

        for arcname, path in _package_files():
            with open(path, "rb") as f:
                add(arcname, f.read())
        add(f"{dist_info}/METADATA", _metadata(version).encode())
        add(f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: bagua_wheel\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n")
        records.append(f"{dist_info}/RECORD,,")
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return wheel_name
