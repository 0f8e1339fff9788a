// libFuzzer target: the btsnoop reader (a valid header for datalink 1001/1002/2001
// chosen by the first byte, then arbitrary records) and the frame decoder over it.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let sel = bytes.first else { return 0 }
    let datalink: [UInt8] = [[0x03, 0xE9], [0x03, 0xEA], [0x07, 0xD1]][Int(sel) % 3]
    let file = Array("btsnoop\0".utf8) + [0, 0, 0, 1, 0, 0] + datalink + bytes.dropFirst()
    if let t = try? TraceReader.read(file) {
        // Both output styles through one decoder (its channel table carries over), and the
        // JSON a frame prints must parse back.
        var d = FrameDecoder()
        let out = OutputBuffer()
        for (i, r) in t.records.enumerated() {
            d.write(r, number: i, firstTimestamp: 0, style: .text, into: out)
            out.removeAll()
            d.write(r, number: i, firstTimestamp: 0, style: .json, into: out)
            precondition((try? JSONValue(parsing: out.bytes)) != nil, "frame \(i) printed invalid JSON")
            out.removeAll()
        }
    }
    return 0
}
