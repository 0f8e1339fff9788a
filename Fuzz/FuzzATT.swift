// libFuzzer target: ATT PDU decoding (a decoded PDU must re-encode and decode to
// itself; the same bytes decode alike from a slice of a frame, as the bearer reads them)
// and the bearer's handling of arbitrary peer PDUs with requests in flight.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let pdu = try? ATTPDU(bytes: bytes) {
        precondition((try? ATTPDU(bytes: pdu.bytes)) == pdu)
    }
    let frame: [UInt8] = [UInt8(truncatingIfNeeded: size), 0x00, 0x04, 0x00] + bytes + [0xEE]
    let slice = frame[4..<(4 + size)]
    precondition((try? ATTPDU(bytes: slice)) == (try? ATTPDU(bytes: bytes)))
    var bearer = ATTBearerState()
    _ = bearer.sendRequest(.readRequest(handle: 1))
    _ = bearer.sendIndication(handle: 2, value: [1])
    _ = bearer.receive(slice)
    _ = bearer.receive(Array(bytes.reversed()))
    return 0
}
