// What every `btctl gatt` client command does first: open the controller, find the
// peer (by address, or by scanning for its name), connect as central with a
// timeout (cancelled with LE Create Connection Cancel), and set up the GATT client
// and the Security Manager that encrypts or pairs when the peer asks for it.

import ArgumentParser
import Foundation
import ATT
import GAP
import GATT
import HCI
import L2CAP
import SMP
import Snoop
import Transports

/// `XX:XX:XX:XX:XX:XX[/random|/public]`, as `btctl scan` prints addresses.
struct PeerAddress: ExpressibleByArgument, Sendable {
    var address: BluetoothAddress
    var type: AddressType
    init?(argument: String) {
        let parts = argument.split(separator: "/")
        guard let a = parts.first.flatMap({ BluetoothAddress(String($0)) }), parts.count <= 2 else { return nil }
        address = a
        switch parts.count == 2 ? parts[1].lowercased() : "public" {
        case "public": type = .public
        case "random": type = .random
        default: return nil
        }
    }
    var description: String { "\(address)\(type == .random ? "/random" : "")" }
}

struct PeerOptions: ParsableArguments {
    @Argument(help: "The peer: XX:XX:XX:XX:XX:XX[/random|/public] (default public).")
    var peer: PeerAddress?

    @Option(help: "Instead of an address: scan and connect to the first device advertising this name.")
    var name: String?

    @Option(help: ArgumentHelp("Seconds to find and connect to the peer.", valueName: "SECONDS"))
    var connectTimeout: Double = 15

    func validate() throws {
        if (peer == nil) == (name == nil) { throw ValidationError("give either a peer address or --name NAME") }
        guard connectTimeout > 0, connectTimeout.isFinite else { throw ValidationError("--connect-timeout must be positive") }
    }
}

/// Which attribute a command acts on.
struct AttributeOptions: ParsableArguments {
    @Option(help: "Attribute handle (decimal or 0x hex).", transform: { s in
        guard let v = s.hasPrefix("0x") ? UInt16(s.dropFirst(2), radix: 16) : UInt16(s) else { throw ValidationError("bad handle '\(s)'") }
        return v
    })
    var handle: UInt16?

    @Option(help: "Characteristic UUID (16-bit like 2A19, or 128-bit); the first match is used.", transform: { s in
        guard let u = BluetoothUUID(s) else { throw ValidationError("bad UUID '\(s)'") }
        return u
    })
    var uuid: BluetoothUUID?

    func validate() throws {
        if (handle == nil) == (uuid == nil) { throw ValidationError("give either --handle or --uuid") }
    }
}

/// Open the controller, find the peer (by address, or by scanning for its name) and
/// connect as central with a timeout: what `btctl gatt` and `btctl l2cap connect` do first.
enum PeerLink {
    static func open(_ options: ControllerOptions, _ peer: PeerOptions) async throws -> (HCIController, L2CAPHost, L2CAPHost.Connection, TraceFileWriter?) {
        let (controller, writer) = try await options.openController()
        do {
            try await controller.initialize()
            let host = L2CAPHost(controller: controller, logger: options.logger)
            await host.start()
            let limit = cliDuration(seconds: peer.connectTimeout)
            let target: (BluetoothAddress, AddressType)
            if let p = peer.peer { target = (p.address, p.type) } else { target = try await Central.find(name: peer.name ?? "", controller: controller, within: limit) }
            let connection = try await Central.connect(to: target.0, type: target.1, host: host, within: limit)
            // On SIGINT/SIGTERM the link ends with a Disconnect, not with the process.
            Interrupt.onSignal { await Central.disconnect(connection, host: host, within: .seconds(2)) }
            return (controller, host, connection, writer)
        } catch {
            await controller.close()
            writer?.close()
            throw error
        }
    }
}

struct GATTSession {
    let controller: HCIController
    let host: L2CAPHost
    let client: GATTClient
    let connection: L2CAPHost.Connection
    let security: SecurityManager
    let json: Bool

    static func open(_ options: ControllerOptions, _ peer: PeerOptions, _ pairing: PairingOptions) async throws -> (GATTSession, TraceFileWriter?) {
        let (controller, host, connection, writer) = try await PeerLink.open(options, peer)
        do {
            let security = await pairing.securityManager(host: host, controller: controller, options: options)
            let client = try await Central.gattClient(on: connection, host: host)
            return (GATTSession(controller: controller, host: host, client: client, connection: connection, security: security, json: options.json), writer)
        } catch {
            await controller.close()
            writer?.close()
            throw error
        }
    }

    func close() async {
        await client.bearer.drain()
        await Central.disconnect(connection, host: host, within: .seconds(2))
        await controller.close()
    }

    func discoverAll() async throws -> [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] {
        try await securedOnDemand { try await client.discoverAll() }
    }

    /// Runs a GATT operation; when the peer refuses it for the link's security
    /// (Insufficient Authentication or Encryption, Encryption Key Size Too Short), the
    /// link is encrypted from the bond or paired, one step at a time as BlueZ does
    /// (`SecurityOnDemand`), and the operation runs again. Reports each new security.
    func securedOnDemand<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let security = self.security, handle = connection.handle, json = self.json
        return try await SecurityOnDemand.run(current: { await security.security(handle: handle) }, secure: { level in
            let s = try await security.secure(handle: handle, level: level)
            if json {
                emit(.object([("event", .string("secured")), ("level", .string(s.level.description)), ("key_size", .int(s.keySize)), ("bonded", .bool(s.bonded))]))
            } else {
                note("the peer asked for security: link \(s)")
            }
        }, body)
    }

    /// A Signed Write Command (Vol 3, Part G, §4.9.2) with our CSRK from the bond and
    /// its next SignCounter; a plain Write Command on an encrypted link, as §4.9.2 asks.
    func writeSigned(_ handle: UInt16, value: [UInt8]) async throws {
        guard !(await security.security(handle: connection.handle).encrypted) else {
            try await client.writeWithoutResponse(handle, value: value)
            return
        }
        let key = try await security.nextSignature(handle: connection.handle)
        try await client.writeSigned(handle, value: value, csrk: key.csrk, counter: key.counter)
    }

    /// The handle an `AttributeOptions` names: `--handle` as given, `--uuid` resolved by discovery.
    func valueHandle(_ a: AttributeOptions) async throws -> UInt16 {
        if let h = a.handle { return h }
        guard let (c, _) = try await characteristic(a) else { throw CLIError("no characteristic \(a.uuid?.description ?? "")") }
        return c.valueHandle
    }

    /// The characteristic an `AttributeOptions` names (by value handle or UUID), with its descriptors.
    func characteristic(_ a: AttributeOptions) async throws -> (DiscoveredCharacteristic, [DiscoveredDescriptor])? {
        for (_, chars) in try await discoverAll() {
            for (c, d) in chars where (a.uuid.map { $0 == c.uuid } ?? false) || a.handle == c.valueHandle { return (c, d) }
        }
        return nil
    }
}

func propertyNames(_ p: CharacteristicProperties) -> [String] { p.names }

/// A value as btctl prints it: `0xHANDLE: hex  "text"` (text only when printable), or
/// `0xHANDLE: hex  87 %` when the characteristic is one whose format btctl knows.
func valueLine(_ handle: UInt16, _ v: [UInt8], uuid: BluetoothUUID? = nil) -> String {
    let shown = uuid.flatMap { CharacteristicFormatter.describe(v, of: $0) } ?? valueText(v).map { "\"\($0)\"" }
    return "0x\(String(handle, radix: 16)): \(v.hexString)\(shown.map { "  " + $0 } ?? "")"
}

/// A value as JSON fields: handle, hex value, text when printable, the formatted value
/// for a known characteristic, and its UUID and name when known.
func valueJSON(_ handle: UInt16, _ v: [UInt8], uuid: BluetoothUUID? = nil) -> [(String, JSONValue)] {
    var o: [(String, JSONValue)] = [("handle", .int(Int(handle))), ("value", .string(v.hexString))]
    if let t = valueText(v) { o.append(("text", .string(t))) }
    if let uuid {
        if let f = CharacteristicFormatter.describe(v, of: uuid) { o.append(("formatted", .string(f))) }
        o.append(("uuid", .string(uuid.description)))
        o += nameField(uuid)
    }
    return o
}

/// `2A19 (Battery Level)`, or the UUID alone when it has no assigned name.
func named(_ uuid: BluetoothUUID) -> String {
    uuid.name.map { "\(uuid) (\($0))" } ?? uuid.description
}

/// `[("name", "Battery Level")]` when the UUID has an assigned name.
func nameField(_ uuid: BluetoothUUID) -> [(String, JSONValue)] {
    uuid.name.map { [("name", .string($0))] } ?? []
}

/// Hex, plus the text when every byte is printable UTF-8.
func valueText(_ v: [UInt8]) -> String? {
    guard !v.isEmpty, let s = String(bytes: v, encoding: .utf8), s.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else { return nil }
    return s
}
