// libFuzzer target: ACL packet decoding and the trace frame decoder's L2CAP/ATT view.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let p = try? HCIPacket(type: .acl, body: bytes) {
        precondition(p.body == bytes)
        _ = FrameDecoder().decode(TraceRecord(timestampMicros: 0, packet: p, direction: .controllerToHost), number: 1, firstTimestamp: 0).json.rendered
    }
    return 0
}
