// libFuzzer target: ATT PDU decoding (a decoded PDU must re-encode and decode to
// itself) and the bearer's handling of arbitrary peer PDUs with requests in flight.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let pdu = try? ATTPDU(bytes: bytes) {
        precondition((try? ATTPDU(bytes: pdu.bytes)) == pdu)
    }
    var bearer = ATTBearerState()
    _ = bearer.sendRequest(.readRequest(handle: 1))
    _ = bearer.sendIndication(handle: 2, value: [1])
    _ = bearer.receive(bytes)
    _ = bearer.receive(Array(bytes.reversed()))
    return 0
}
