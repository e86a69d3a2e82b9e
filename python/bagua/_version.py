# The C library's version; CMake checks at configure time that it equals project(VERSION).
__version__ = "0.1.0"
