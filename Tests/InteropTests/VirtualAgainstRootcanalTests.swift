// The virtual radio's Bluetooth 5 controller against Rootcanal's: the same script of
// extended advertising commands, with the host's mistakes among them, gets the same
// status from both, command by command.

import BLETesting
import HCI
import Testing
import Transports

struct VirtualAgainstRootcanalTests {
    /// One command of the script: its name (for the failure message) and how to send it.
    struct Step: Sendable {
        var name: String
        var send: @Sendable (HCIController) async throws -> HCIStatus
        init<C: HCICommand>(_ name: String, _ command: C) {
            self.name = name
            send = { try await $0.status(of: command) }
        }
    }

    static func parameters(_ handle: UInt8, _ properties: UInt16, own: AddressType = .public) -> LESetExtendedAdvertisingParameters {
        LESetExtendedAdvertisingParameters(advertisingHandle: handle, advertisingEventProperties: properties,
                                           primaryAdvertisingIntervalMin: 0xA0, primaryAdvertisingIntervalMax: 0xA0, ownAddressType: own)
    }
    static func data(_ handle: UInt8, _ n: Int, operation: UInt8 = 3) -> LESetExtendedAdvertisingData {
        LESetExtendedAdvertisingData(advertisingHandle: handle, operation: operation, data: [UInt8](repeating: 0x5A, count: n))
    }
    static func enable(_ handle: UInt8, _ on: Bool = true) -> LESetExtendedAdvertisingEnable {
        LESetExtendedAdvertisingEnable(enable: on, sets: [.init(advertisingHandle: handle)])
    }

    static let script: [Step] = [
        Step("data for a set not made", data(1, 3)),
        Step("enable a set not made", enable(1)),
        Step("connectable and scannable extended", parameters(1, 0x03)),
        Step("legacy ADV_IND set", parameters(1, 0x13)),
        Step("legacy data of 32", data(1, 32)),
        Step("legacy data in a fragment", data(1, 20, operation: 1)),
        Step("legacy data of 31", data(1, 31)),
        Step("enable the legacy set", enable(1)),
        Step("parameters while enabled", parameters(1, 0x13)),
        Step("remove while enabled", LERemoveAdvertisingSet(advertisingHandle: 1)),
        Step("disable", enable(1, false)),
        Step("connectable extended set", parameters(2, 0x01)),
        Step("connectable data of 247", data(2, 247)),
        Step("enable with 247", enable(2)),
        Step("connectable data of 246", data(2, 246)),
        Step("enable with 246", enable(2)),
        Step("a fragment while enabled", data(2, 10, operation: 1)),
        Step("disable it", enable(2, false)),
        Step("non-connectable extended set", parameters(3, 0x00)),
        Step("first fragment", data(3, 251, operation: 1)),
        Step("enable with a fragment pending", enable(3)),
        Step("an empty intermediate fragment", data(3, 0, operation: 0)),
        Step("last fragment", data(3, 100, operation: 2)),
        Step("enable with 351", enable(3)),
        Step("scannable extended set, random address", parameters(4, 0x02, own: .random)),
        Step("advertising data on a scannable set", data(4, 10)),
        Step("enable without a scan response", enable(4)),
        Step("scan response", LESetExtendedScanResponseData(advertisingHandle: 4, data: [2, 1, 6])),
        Step("enable without the set's random address", enable(4)),
        Step("the set's random address", LESetAdvertisingSetRandomAddress(advertisingHandle: 4, randomAddress: BluetoothAddress("C0:00:00:00:0E:04")!)),
        Step("enable it", enable(4)),
        Step("disable all", LESetExtendedAdvertisingEnable(enable: false, sets: [])),
        Step("a legacy command after extended ones", LESetAdvertisingEnable(advertisingEnable: true)),
        Step("clear the sets", LEClearAdvertisingSets()),
        Step("remove a cleared set", LERemoveAdvertisingSet(advertisingHandle: 2)),
        Step("Reset", Reset()),
        Step("a legacy command first", LESetAdvertisingParameters()),
        Step("then an extended one", parameters(1, 0x13)),
    ]

    static func run(_ h: HCIController) async throws -> [String] {
        var out: [String] = []
        for s in script { out.append("\(s.name): \(try await s.send(h))") }
        return out
    }

    @Test func extendedAdvertisingStatusesAreRootcanals() async throws {
        guard let binary = try Interop.rootcanal() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let theirs = HCIController(transport: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: Interop.logger), logger: Interop.logger)
        let info = try await theirs.initialize(extendedAdvertising: false)
        #expect(info.supportsExtendedAdvertising)
        let radio = VirtualRadio()
        let ours = HCIController(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0E:0F")!, extendedAdvertising: true),
                                 logger: Interop.logger)
        _ = try await ours.initialize(extendedAdvertising: false)
        let (r, v) = (try await Self.run(theirs), try await Self.run(ours))
        for (a, b) in zip(r, v) { #expect(a == b, "Rootcanal: \(a); virtual: \(b)") }
        await theirs.close()
        await ours.close()
    }
}
