// Tests that import BLETesting also get the virtual radio (module VirtualHCI, which
// btctl demo and the fire-alarm example link without BLETesting).
@_exported import VirtualHCI
