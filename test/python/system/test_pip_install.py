"""`pip install` inside a base sandbox through the official e2b Python SDK, as on E2B: its base
image (a Docker python) has no PEP 668 marker, so a plain `pip install` works as user (into
~/.local) and with sudo (into /usr/local). Debian's python has the marker (EXTERNALLY-MANAGED),
which base's recipe leaves out; with it both installs fail with "externally-managed-environment".

The wheels are made here and written into the sandbox with files.write, so no index is needed
(the e2e package-install test covers the same through a package mirror stand-in)."""
import base64
import hashlib
import io
import re
import uuid
import zipfile


def wheel(name: str, version: str, module: str) -> tuple[str, bytes]:
    """A pure-Python wheel: <name>/__init__.py plus the dist-info pip checks (RECORD hashes)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": module.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()


def test_pip_install_as_user_and_with_sudo_without_flags(sbx):
    tag = uuid.uuid4().hex[:8]
    for who, name in (("user", f"py_user_pkg_{tag}"), ("sudo", f"py_sys_pkg_{tag}")):
        file, data = wheel(name, "0.2", f'VALUE = "{who}-{tag}"\n')
        sbx.files.write(f"/home/user/{file}", data)
        prefix = "sudo " if who == "sudo" else ""
        r = sbx.commands.run(f"{prefix}pip install --no-index --no-cache-dir /home/user/{file}", timeout=120)
        # pip prints the distribution's normalized name (`_` may become `-`).
        assert re.search(rf"Successfully installed {name.replace('_', '[-_]')}-0\.2", r.stdout), r.stdout
        show = sbx.commands.run(f"pip show {name}").stdout
        where = "/home/user/.local/lib/python3" if who == "user" else "/usr/local/lib/python3"
        assert f"Location: {where}" in show
        imported = sbx.commands.run(f"cd / && python -c 'import {name}; print({name}.VALUE)'")
        assert imported.stdout == f"{who}-{tag}\n"
