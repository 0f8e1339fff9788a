// A central below the facade, for tests and benchmarks that drive L2CAP, SMP or GATT
// directly against a peer (Bumble, Rootcanal, a replay): find a peripheral by name,
// connect with a timeout, open a GATT client. Shipped code connects through the
// facade (`Central.connect` in BLE), the one connect path of the stack.

import ATT
import GAP
import GATT
import HCI
import L2CAP

public enum TestCentralError: Error, Equatable, Sendable, CustomStringConvertible {
    case notFound(name: String, within: Duration)
    case connectionTimeout(BluetoothAddress, within: Duration)

    public var description: String {
        switch self {
        case let .notFound(name, d): return "no device named '\(name)' advertised within \(d)"
        case let .connectionTimeout(a, d): return "no connection to \(a) within \(d)"
        }
    }
}

public enum TestCentral {
    /// Scans (active, 10 ms interval and window, every report) until an advertising
    /// report carries `name` as its local name; stops scanning either way.
    public static func find(name: String, controller: HCIController, within limit: Duration) async throws -> (BluetoothAddress, AddressType) {
        let ads = try await Scanner.start(controller, active: true, filterDuplicates: false,
                                         filter: ScanFilter(names: [name]), interval: 0x0010, window: 0x0010)
        let found = await firstElement(ads, within: limit, on: controller.loop).map { ($0.address, $0.addressType) }
        _ = try? await controller.send(LESetScanEnable(scanEnable: false))
        guard let found else { throw TestCentralError.notFound(name: name, within: limit) }
        return found
    }

    /// Connects as central (LE Create Connection); on timeout cancels the attempt and throws.
    public static func connect(to address: BluetoothAddress, type: AddressType, host: L2CAPHost, within limit: Duration) async throws -> L2CAPHost.Connection {
        let connections = await host.newConnections()
        try await host.controller.send(LECreateConnection(peerAddressType: type, peerAddress: address))
        guard let c = await firstElement(connections.filter { $0.peer == address }, within: limit, on: host.loop) else {
            _ = try? await host.controller.send(LECreateConnectionCancel())
            throw TestCentralError.connectionTimeout(address, within: limit)
        }
        return c
    }

    /// A started GATT client on `connection`, with the MTU exchanged.
    public static func gattClient(on connection: L2CAPHost.Connection, host: L2CAPHost, localRxMTU: UInt16 = 517) async throws -> GATTClient {
        let client = GATTClient(bearer: ATTBearer(channel: L2CAPATTChannel(host: host, handle: connection.handle), localRxMTU: localRxMTU, logger: host.logger))
        await client.start()
        try await client.exchangeMTU()
        return client
    }
}
