// libFuzzer target: L2CAP reassembly (arbitrary fragments on two connections) and
// the LE signaling channel in both roles.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var r = Reassembler(maximumPayload: 512)
    var i = 0
    while i < bytes.count {
        let ctl = bytes[i]
        let n = Int(ctl >> 3)
        let chunk = Array(bytes[(i + 1)..<min(bytes.count, i + 1 + n)])
        i += 1 + n
        let boundary: ACLPacketBoundary = ctl & 1 == 0 ? .continuing : .firstFlushable
        _ = r.receive(ACLDataPacket(handle: UInt16(ctl >> 1 & 1), boundary: boundary, data: chunk))
    }
    var central = LESignalingChannel(role: .central)
    var peripheral = LESignalingChannel(role: .peripheral)
    _ = peripheral.requestParameterUpdate(ConnectionParameterUpdate(intervalMin: 6, intervalMax: 6, latency: 0, timeout: 100))
    _ = central.receive(bytes)
    _ = peripheral.receive(bytes)
    return 0
}
