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


def pytest_report_header(config):
    return f"bagua {bagua.__version__} from {bagua.library_path()}, pid {os.getpid()}"
