// Tests that import BLETesting also get the virtual radio (module VirtualHCI, which
// btctl demo and the fire-alarm example link without BLETesting) and the trace
// replay (module Snoop, which btctl links for `btctl trace replay`).
@_exported import VirtualHCI
@_exported import Snoop
