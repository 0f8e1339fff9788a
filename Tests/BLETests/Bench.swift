// Two hosts that can hear each other: on the in-process virtual radio, or on a
// Rootcanal started for the test (a controller nobody here wrote). The system tests
// run the same bodies on both.

import BLE
import BLETesting
import Foundation
import HCI
import Logging
import Testing
import Snoop
import Transports

enum BenchKind: String, CustomStringConvertible, Sendable, CaseIterable {
    case virtual, rootcanal
    var description: String { rawValue }
}

struct Bench: Sendable {
    let central: BluetoothHost
    let peripheral: BluetoothHost
    let peripheralAddress: BluetoothAddress
    /// Lets advertising reach scanners (the virtual radio has no timers; Rootcanal needs none).
    let tick: @Sendable () async -> Void
    let stopAll: @Sendable () async -> Void
    /// Stops the processes the bench started, at once (for `defer`, which cannot await:
    /// a Task scheduled there may never run before the test process exits).
    let stopProcesses: @Sendable () -> Void
    /// Whether RSSI follows the distance set (the virtual radio's path-loss model); Rootcanal's is random.
    let modelsDistance: Bool
    let setDistance: @Sendable (Double) async -> Void

    static let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
    static let required = ProcessInfo.processInfo.environment["BLE_REQUIRE_INTEROP"] == "1"
    /// Silent, unless BLE_TEST_LOG is a level (trace, debug, ...): then to stderr.
    static let logger: Logger = {
        guard let level = ProcessInfo.processInfo.environment["BLE_TEST_LOG"].flatMap(Logger.Level.init(rawValue:)) else {
            return Logger(label: "ble-tests") { _ in SwiftLogNoOpLogHandler() }
        }
        var l = Logger(label: "ble-tests") { StreamLogHandler.standardError(label: $0) }
        l.logLevel = level
        return l
    }()

    /// A Rootcanal of its own for one test; nil when it is not installed and the
    /// interop run is not required.
    static func launchRootcanal() async throws -> RootcanalProcess? {
        let binary: String
        do { binary = try RootcanalProcess.locate(packageRoot: root) } catch {
            if required { throw error }
            return nil
        }
        return try await RootcanalProcess.launch(binary: binary)
    }

    /// Hosts on a Rootcanal of their own, each started with `security(i)`; nil when
    /// Rootcanal is not installed and the interop run is not required.
    static func rootcanalHosts(_ count: Int, security: (Int) -> SecurityOptions = { _ in SecurityOptions() }) async throws -> RootcanalHosts? {
        guard let rc = try await launchRootcanal() else { return nil }
        do {
            var hosts: [BluetoothHost] = [], addresses: [BluetoothAddress] = []
            for i in 0..<count { hosts.append(try BluetoothHost.open(rc.transportSpec, logger: logger, security: security(i))) }
            for h in hosts { addresses.append(try await h.start().address) }
            return RootcanalHosts(rootcanal: rc, hosts: hosts, addresses: addresses)
        } catch {
            rc.stop()
            throw error
        }
    }

    /// Nil when Rootcanal is not installed and the interop run is not required.
    static func make(_ kind: BenchKind) async throws -> Bench? {
        switch kind {
        case .virtual:
            let radio = VirtualRadio()
            let a = BluetoothAddress("C0:00:00:00:00:01")!, b = BluetoothAddress("C0:00:00:00:00:02")!
            let central = BluetoothHost(transport: await radio.makeController(address: a), logger: logger)
            let pc = await radio.makeController(address: b)
            await pc.setTxPower(0)
            let peripheral = BluetoothHost(transport: pc, logger: logger)
            try await central.start()
            try await peripheral.start()
            return Bench(central: central, peripheral: peripheral, peripheralAddress: b, tick: { await radio.tick() },
                         stopAll: { await central.close(); await peripheral.close() }, stopProcesses: {}, modelsDistance: true,
                         setDistance: { await radio.setDistance($0, between: a, and: b) })
        case .rootcanal:
            guard let rc = try await launchRootcanal() else { return nil }
            do {
                let central = BluetoothHost(transport: try recorded("central", StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: logger)), logger: logger)
                let peripheral = BluetoothHost(transport: try recorded("peripheral", StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: logger)), logger: logger)
                try await central.start()
                let info = try await peripheral.start()
                return Bench(central: central, peripheral: peripheral, peripheralAddress: info.address, tick: {},
                             stopAll: { await central.close(); await peripheral.close(); rc.stop() }, stopProcesses: { rc.stop() },
                             modelsDistance: false,
                             setDistance: { _ in })
            } catch {
                rc.stop()
                throw error
            }
        }
    }
}

/// With BLE_TEST_BTSNOOP=DIR, the Rootcanal sessions are recorded there (central.btsnoop, peripheral.btsnoop).
func recorded(_ name: String, _ t: any HCITransport) throws -> any HCITransport {
    guard let dir = ProcessInfo.processInfo.environment["BLE_TEST_BTSNOOP"] else { return t }
    return RecordingTransport(wrapping: t, writer: try TraceFileWriter(path: dir + "/\(name).btsnoop"))
}

/// Hosts on one Rootcanal (`Bench.rootcanalHosts`), each started; `addresses[i]` is
/// `hosts[i]`'s public address.
struct RootcanalHosts: Sendable {
    let rootcanal: RootcanalProcess
    let hosts: [BluetoothHost]
    let addresses: [BluetoothAddress]

    /// For `defer`: closes the hosts (on a task) and stops Rootcanal at once, as a
    /// test must stop every process it started before it ends.
    func stop() {
        let hosts = self.hosts
        Task { for h in hosts { await h.close() } }
        rootcanal.stop()
    }
}
