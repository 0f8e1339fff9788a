// libFuzzer target: the H4 framer and packet decoding, fed arbitrary bytes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    var f = H4Framer()
    f.append(UnsafeBufferPointer(start: data, count: size))
    while let p = try? f.nextPacket() {
        // Whatever framed must re-encode to the bytes it came from.
        precondition(p.h4Bytes.count >= 3)
    }
    return 0
}
