// libFuzzer target: the GATT client procedures against a server that answers
// anything. The input is a series of answers, each a length byte and that many
// bytes decoded as an ATT PDU (undecodable ones are skipped). Every procedure must
// end (finished or a typed error) without trapping, and never send more requests
// than it received answers plus one.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var answers: [ATTPDU] = []
    var i = 0
    while i < bytes.count {
        let n = Int(bytes[i])
        let end = Swift.min(bytes.count, i + 1 + n)
        if let pdu = try? ATTPDU(bytes: Array(bytes[(i + 1)..<end])) { answers.append(pdu) }
        i = end
    }
    let service = DiscoveredService(uuid: BluetoothUUID(0x180F), start: 1, end: 0x20, isPrimary: true)
    let chars = [
        DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A19), declarationHandle: 2, valueHandle: 3, properties: [.notify], end: 6),
        DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A1A), declarationHandle: 7, valueHandle: 8, properties: [.read], end: 0x20),
    ]
    run(PrimaryServiceDiscovery(mtu: 23), answers)
    run(PrimaryServiceDiscovery(uuid: BluetoothUUID(0x180F), mtu: 247), answers)
    run(IncludedServiceDiscovery(service: service, mtu: 23), answers)
    run(CharacteristicDiscovery(services: [service, DiscoveredService(uuid: BluetoothUUID(0x1800), start: 0x30, end: 0xFFFF, isPrimary: true)], mtu: 247), answers)
    run(DescriptorDiscovery(characteristics: chars, mtu: 23), answers)
    run(ReadLongProcedure(handle: 3, mtu: 23), answers)
    run(ReadByUUIDProcedure(uuid: BluetoothUUID(0x2A19), range: 1...0x20, mtu: 23), answers)
    run(ReadByUUIDProcedure(uuid: BluetoothUUID(0x2A19), range: 1...0x20, mtu: 23, all: true), answers)
    run(PreparedWriteProcedure(writes: [(handle: 3, value: Array(repeating: 7, count: 40)), (handle: 8, value: [])], mtu: 23), answers)
    run(ReadValuesProcedure(handles: [3, 5, 8, 3], mtu: 23), answers)
    return 0
}

func run<P: GATTClientProcedure>(_ procedure: P, _ answers: [ATTPDU]) {
    var p = procedure
    guard case .request = p.start() else { return }
    var requests = 1
    for a in answers {
        guard let step = try? p.receive(a) else { return }
        guard case .request = step else { return }
        requests += 1
        precondition(requests <= answers.count + 1)
    }
}
