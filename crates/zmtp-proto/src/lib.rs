//! Sans-IO ZMTP 3.1: no sockets, no runtime, no clock.
#![forbid(unsafe_code)]
