// libFuzzer target: the pcap and pcapng readers (arbitrary bytes, with a pcap header
// for link type 187/201/254 prepended when the first byte is even).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let sel = bytes.first else { return 0 }
    var file: [UInt8]
    if sel % 2 == 0 {
        let link: UInt8 = [187, 201, 254][Int(sel / 2) % 3]
        file = [0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0, link, 0, 0, 0] + bytes.dropFirst()
    } else {
        file = Array(bytes.dropFirst())
    }
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
