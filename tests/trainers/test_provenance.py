"""Why torch cannot use CUDA: the driver's CUDA version, read through the driver API."""

import ctypes


class _Driver:
    """libcuda.so.1 as ctypes loads it: cuDriverGetVersion(int *) writes 1000 * major + 10 * minor."""

    def __init__(self, version: int, result: int = 0):
        self.version, self.result = version, result

    def cuDriverGetVersion(self, pointer) -> int:
        pointer._obj.value = self.version
        return self.result


def test_the_driver_cuda_version_is_read_as_major_dot_minor(monkeypatch):
    """12040 is CUDA 12.4 and 11080 is 11.8 (the CUDA driver API's encoding); a failed call or no driver gives None."""
    from hpstudy.trainers import provenance

    for version, shown in ((12040, "12.4"), (11080, "11.8")):
        monkeypatch.setattr(ctypes, "CDLL", lambda name, v=version: _Driver(v))
        assert provenance._driver_cuda_version() == shown
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _Driver(12040, result=3))
    assert provenance._driver_cuda_version() is None

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert provenance._driver_cuda_version() is None
