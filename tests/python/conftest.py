"""Every rank runs the same tests in the same order (pytest's collection order), so each test may call
collectives. The communicator is made once per process from the launcher's environment."""

import os

import pytest

import bagua


@pytest.fixture(scope="session")
def comm():
    communicator = bagua.init()
    yield communicator
    bagua.destroy()


@pytest.fixture(scope="module")
def gloo(comm):
    """torch.distributed over gloo for the same ranks (bagua.torch.init_process_group), for the tests that compare
    with torch's own DDP; torch is imported only by the tests that ask for it."""
    import torch.distributed as dist

    import bagua.torch

    bagua.torch.init_process_group("gloo", comm)
    yield
    dist.destroy_process_group()


def pytest_report_header(config):
    return f"bagua {bagua.__version__} from {bagua.library_path()}, pid {os.getpid()}"
