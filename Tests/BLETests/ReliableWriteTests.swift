// Read Using Characteristic UUID and Reliable Writes through the facade
// (`RemotePeripheral.read(uuid:in:)`, `writeReliably`), against our GATT server on the
// virtual radio: every value of a type in handle order and whole, several values
// written together or none of them.

import BLE
import BLETesting
import GATT
import Testing

@Suite(.timeLimit(.minutes(3))) struct ReliableWriteTests {
    @Test func aReliableWriteWritesEveryValueOrNone() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let a = Characteristic(uuid: uuidB, properties: [.read, .write], value: [0])
        let b = Characteristic(uuid: uuidB, properties: [.read, .write], value: [0])
        let locked = Characteristic(uuid: uuidC, properties: [.read], value: [9])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [a, b, locked]))
        let service = try #require(try await pair.remoteServices().first { $0.uuid == uuidA })
        let (ra, rb, rlocked) = (service.characteristics[0], service.characteristics[1], service.characteristics[2])
        // 300 octets: prepared in pieces of ATT_MTU - 5, read back cut at 253 and completed.
        let long = (0..<300).map { UInt8($0 & 0xFF) }
        try await pair.remote.writeReliably([(ra, [1, 2]), (rb, long)])
        #expect(try await pair.server.peripheral.value(of: a) == [1, 2])
        #expect(try await pair.server.peripheral.value(of: b) == long)
        let both = try await pair.remote.read(uuid: uuidB)
        #expect(both.map(\.handle) == [ra.valueHandle, rb.valueHandle] && both.map(\.value) == [[1, 2], long])
        // Within a range: the second alone.
        #expect(try await pair.remote.read(uuid: uuidB, in: rb.valueHandle...0xFFFF).map(\.value) == [long])
        // A value the server refuses: nothing written, its error thrown.
        await #expect(throws: BLEError.att(.writeNotPermitted, handle: rlocked.valueHandle)) {
            try await pair.remote.writeReliably([(ra, [7]), (rlocked, [7])])
        }
        #expect(try await pair.server.peripheral.value(of: a) == [1, 2])
        #expect(try await pair.remote.read(uuid: BluetoothUUID(0x2BFF)).isEmpty)
        await #expect(throws: BLEError.self) { try await pair.remote.writeReliably(handles: []) }
        await #expect(throws: BLEError.self) { try await pair.remote.read(uuid: uuidB, in: 0...5) }
    }
}
