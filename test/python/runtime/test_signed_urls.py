import json
import uuid
from urllib.error import HTTPError
from urllib.request import Request, urlopen


def test_download_url_needs_no_headers(sandbox, workdir):
    sandbox.files.write(f"{workdir}/dl.txt", "signed by python")
    with urlopen(sandbox.download_url(f"{workdir}/dl.txt", user="user")) as res:
        assert res.status == 200
        assert res.read() == b"signed by python"


def test_tampered_url_is_refused(sandbox, workdir):
    url = sandbox.download_url(f"{workdir}/dl.txt").replace("dl.txt", "other.txt")
    try:
        urlopen(url)
        raise AssertionError("expected 401")
    except HTTPError as e:
        assert e.code == 401


def test_upload_url_accepts_multipart(sandbox, workdir):
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="up.txt"\r\n'
        f"Content-Type: text/plain\r\n\r\nuploaded\r\n--{boundary}--\r\n"
    ).encode()
    req = Request(sandbox.upload_url(f"{workdir}/up.txt"), data=body, method="POST",
                  headers={"content-type": f"multipart/form-data; boundary={boundary}"})
    with urlopen(req) as res:
        assert json.loads(res.read()) == [{"name": "up.txt", "path": f"{workdir}/up.txt", "type": "file"}]
    assert sandbox.files.read(f"{workdir}/up.txt") == "uploaded"
