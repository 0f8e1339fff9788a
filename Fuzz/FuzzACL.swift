// libFuzzer target: ACL packet decoding and the trace frame decoder's L2CAP/ATT view,
// over a sequence of packets (a length byte, then that many bytes of ACL body; the
// length's top bit picks the direction), so signaling can open channels that later
// packets use and frames split over packets are reassembled; every frame's JSON must
// parse back, and the frames held for reassembly stay within their bound.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var d = FrameDecoder()
    let out = OutputBuffer()
    var i = 0
    var n = 0
    while i < bytes.count {
        let len = Int(bytes[i] & 0x7F)
        let dir: TraceRecord.Direction = bytes[i] & 0x80 != 0 ? .hostToController : .controllerToHost
        let body = Array(bytes[(i + 1)..<min(bytes.count, i + 1 + len)])
        i += 1 + len
        guard let p = try? HCIPacket(type: .acl, body: body) else { continue }
        precondition(p.body == body)
        n += 1
        let r = TraceRecord(timestampMicros: 0, packet: p, direction: dir)
        d.write(r, number: n, firstTimestamp: 0, style: .text, into: out)
        out.removeAll()
        d.write(r, number: n, firstTimestamp: 0, style: .json, into: out)
        precondition((try? JSONValue(parsing: out.bytes)) != nil, "frame \(n) printed invalid JSON")
        out.removeAll()
        precondition(d.reassembly.count <= ACLReassembly.limit, "\(d.reassembly.count) frames held")
        precondition(d.sduReassembly.count <= SDUReassembly.limit, "\(d.sduReassembly.count) SDUs held")
    }
    return 0
}
