// `--transport virtual`: a controller on the in-process virtual radio, with a peer to
// talk to: a fire-alarm sender ("FireAlarm-B3" at C0:FF:EE:00:00:01, 3.5 m away)
// advertising and serving its database (docs/fire-alarm.md). btctl's own controller
// is C0:FF:EE:00:00:02. Everything lives until btctl exits. `virtual5`: both
// controllers have the Bluetooth 5 extended advertising, scanning and connection
// commands, so both hosts use those, and the sender also broadcasts its state in a
// periodic advertising train (`btctl sync`).

import BLE
import FireAlarm
import Logging
import Synchronization
import VirtualHCI

enum VirtualPeer {
    static let peerAddress = BluetoothAddress("C0:FF:EE:00:00:01")!  // safe: a literal
    static let ownAddress = BluetoothAddress("C0:FF:EE:00:00:02")!  // safe: a literal

    /// What keeps the radio (controllers hold it weakly), the peer and the radio's clock alive.
    private static let world = Mutex<[any Sendable]>([])

    static func controller(logger: Logger, extendedAdvertising: Bool = false) async throws -> VirtualController {
        let radio = VirtualRadio()
        await radio.setDistance(3.5, between: peerAddress, and: ownAddress)
        tick(radio, every: .milliseconds(50))
        try await addFireAlarmSender(to: radio, extendedAdvertising: extendedAdvertising)
        return await radio.makeController(address: ownAddress, extendedAdvertising: extendedAdvertising)
    }

    /// Advertising is heard as the radio's time passes, here every `interval` of its
    /// loop's time (one advertising event of every set), until btctl exits.
    static func tick(_ radio: VirtualRadio, every interval: Duration) {
        let ticker = radio.tick(every: interval)
        world.withLock { $0 += [radio, ticker] }
    }

    /// The fire-alarm sender ("FireAlarm-B3" at `peerAddress`) on `radio`, advertising
    /// and serving its database until btctl exits; with `extendedAdvertising`, also
    /// its periodic train.
    static func addFireAlarmSender(to radio: VirtualRadio, extendedAdvertising: Bool) async throws {
        let peerHost = BluetoothHost(transport: await radio.makeController(address: peerAddress, extendedAdvertising: extendedAdvertising),
                                     logger: Logger(label: "virtual-peer") { _ in SwiftLogNoOpLogHandler() }, deviceName: "FireAlarm-B3")
        try await peerHost.start()
        let sender = FireAlarmSender(host: peerHost, name: "FireAlarm-B3", log: { _ in })
        try await sender.start()
        if extendedAdvertising {
            // Bluetooth 5: the sender also broadcasts its state in a periodic train
            // (`btctl sync`), from a non-connectable set of its own.
            var name = AdvertisingData()
            name.localName = "FireAlarm-B3 status"
            let set = try await peerHost.peripheral.addAdvertisingSet(name)
            var state = AdvertisingData()
            state.manufacturerData = [.init(companyIdentifier: 0xFFFF, data: Array("FA ok".utf8))]
            try await peerHost.peripheral.startPeriodicAdvertising(on: set, data: state, intervalMilliseconds: 100)
        }
        world.withLock { $0 += [peerHost, sender] }
    }
}
