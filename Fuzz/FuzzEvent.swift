// libFuzzer target: event decoding (first byte = event code) and command decoding
// (first two bytes = opcode) on arbitrary parameters; a decoded value must re-encode
// and decode to itself.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard bytes.count >= 2 else { return 0 }
    if let e = try? HCIEvent(code: HCIEventCode(rawValue: bytes[0]), parameters: Array(bytes.dropFirst())) {
        precondition((try? HCIEvent(code: e.code, parameters: e.parameters)) == e)
    }
    let opcode = HCIOpcode(rawValue: UInt16(bytes[0]) | UInt16(bytes[1]) << 8)
    if let c = try? HCICommandRegistry.decode(opcode: opcode, parameters: Array(bytes.dropFirst(2))) {
        _ = c.parameters
    }
    _ = ADStructure.parse(bytes)
    return 0
}
