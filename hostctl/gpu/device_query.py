#!/usr/bin/env python3
"""The GPU device query `up` runs inside the runtime image before the long load: which GPUs
NVML and the CUDA driver see from inside the container, or the error code each returns.

Standalone on purpose: it is passed to the image's own python3 (`python3 -c <this file>`), so it
uses only the standard library and the driver libraries the NVIDIA Container Toolkit injects
(libnvidia-ml.so.1, libcuda.so.1) through ctypes. Python 3.6+ syntax, as old base images have.
It prints one JSON document (hostctl.device-query/v1) and exits 0 whatever it found: the
decision is hostctl.service.gpu_preflight's, made on the recorded output.

Run it on a GPU host directly to see what it reports there: `python3 hostctl/gpu/device_query.py`.
"""

import ctypes
import json
import os
import sys

SCHEMA = "hostctl.device-query/v1"


def _uuid_from_bytes(raw):
    h = bytes(raw).hex()
    return "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


def query_nvml():
    out = {"ok": False, "library": None, "error": None, "driver_version": None, "devices": []}
    lib = None
    for name in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
        try:
            lib = ctypes.CDLL(name)
            out["library"] = name
            break
        except OSError as exc:
            out["error"] = {"code": "library-not-found", "text": str(exc)}
    if lib is None:
        return out
    lib.nvmlErrorString.restype = ctypes.c_char_p

    def err(code):
        return {"code": int(code), "text": (lib.nvmlErrorString(code) or b"").decode(errors="replace")}

    init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
    rc = init()
    if rc != 0:
        out["error"] = err(rc)
        return out
    out["error"] = None
    try:
        buf = ctypes.create_string_buffer(96)
        if lib.nvmlSystemGetDriverVersion(buf, 96) == 0:
            out["driver_version"] = buf.value.decode()
        count = ctypes.c_uint(0)
        get_count = getattr(lib, "nvmlDeviceGetCount_v2", None) or lib.nvmlDeviceGetCount
        rc = get_count(ctypes.byref(count))
        if rc != 0:
            out["error"] = err(rc)
            return out
        by_index = getattr(lib, "nvmlDeviceGetHandleByIndex_v2", None) or lib.nvmlDeviceGetHandleByIndex
        for i in range(count.value):
            handle = ctypes.c_void_p()
            rc = by_index(i, ctypes.byref(handle))
            if rc != 0:
                out["devices"].append({"index": i, "error": err(rc)})
                continue
            uuid, name = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            lib.nvmlDeviceGetUUID(handle, uuid, 96)
            lib.nvmlDeviceGetName(handle, name, 96)
            out["devices"].append({"index": i, "uuid": uuid.value.decode(), "name": name.value.decode()})
        out["ok"] = True
    finally:
        lib.nvmlShutdown()
    return out


def query_cuda():
    out = {"ok": False, "library": None, "error": None, "driver_version": None, "uuids": []}
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        out["library"] = "libcuda.so.1"
    except OSError as exc:
        out["error"] = {"code": "library-not-found", "text": str(exc)}
        return out

    def err(code):
        name = ctypes.c_char_p()
        try:
            lib.cuGetErrorName(code, ctypes.byref(name))
        except AttributeError:
            pass
        return {"code": int(code), "text": (name.value or b"").decode(errors="replace")}

    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
        out["driver_version"] = version.value
    rc = lib.cuInit(0)
    if rc != 0:
        out["error"] = err(rc)
        return out
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        out["error"] = err(rc)
        return out
    get_uuid = getattr(lib, "cuDeviceGetUuid_v2", None) or getattr(lib, "cuDeviceGetUuid", None)
    for i in range(count.value):
        dev = ctypes.c_int(0)
        raw = (ctypes.c_ubyte * 16)()
        if lib.cuDeviceGet(ctypes.byref(dev), i) == 0 and get_uuid is not None and get_uuid(raw, dev) == 0:
            out["uuids"].append(_uuid_from_bytes(raw))
        else:
            out["uuids"].append(None)
    out["ok"] = True
    return out


def main():
    doc = {
        "schema": SCHEMA,
        "python": sys.version.split()[0],
        "env": {k: os.environ.get(k) for k in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                                               "NVIDIA_DRIVER_CAPABILITIES")},
    }
    for part, fn in (("nvml", query_nvml), ("cuda", query_cuda)):
        try:
            doc[part] = fn()
        except Exception as exc:  # a query that breaks is reported, not raised: the decision is the caller's
            doc[part] = {"ok": False, "error": {"code": "exception", "text": "%s: %s" % (type(exc).__name__, exc)}}
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
