// What every `btctl gatt` client command, `btctl pair` and `btctl l2cap connect` do
// first, through the facade (`BluetoothHost`, the stack's one way to connect): start
// the host, find the peer (by address, or by scanning for its name), connect as
// central with a timeout, with pairing on demand when the peer asks for security.

import ArgumentParser
import BLE
import Foundation
import GATT
import HCI
import Snoop

/// `XX:XX:XX:XX:XX:XX[/random|/public]`, as `btctl scan` prints addresses.
extension DeviceAddress: ExpressibleByArgument {
    public init?(argument: String) {
        let parts = argument.split(separator: "/")
        guard let a = parts.first.flatMap({ BluetoothAddress(String($0)) }), parts.count <= 2 else { return nil }
        switch parts.count == 2 ? parts[1].lowercased() : "public" {
        case "public": self.init(a, type: .public)
        case "random": self.init(a, type: .random)
        default: return nil
        }
    }
}

struct PeerOptions: ParsableArguments {
    @Argument(help: "The peer: XX:XX:XX:XX:XX:XX[/random|/public] (default public). Given several, connects to whichever advertises first (the controller's Filter Accept List).")
    var peers: [DeviceAddress] = []

    @Option(help: "Instead of an address: scan and connect to the first device advertising this name.")
    var name: String?

    @Option(help: ArgumentHelp("Seconds to find and connect to the peer.", valueName: "SECONDS"))
    var connectTimeout: Double = 15

    @Option(help: ArgumentHelp("Find and connect to the peer on this PHY (repeatable: 1m, coded; default 1m): coded reaches a peripheral advertising long range (needs a controller with extended advertising).",
                               valueName: "PHY"), transform: parsePHY)
    var connectPhy: [PHY] = []

    @Option(help: ArgumentHelp("The link's connection parameters: MIN:MAX:LATENCY:TIMEOUT, intervals in 1.25 ms units (6 to 3200, MIN at most MAX), latency in connection events (0 to 499), timeout in 10 ms units (10 to 3200, longer than (1 + LATENCY) × MAX × 2); default 24:40:0:500.",
                               valueName: "PARAMETERS"), transform: parseConnectionParameters)
    var connectionParameters: LEConnectionParameters = LEConnectionParameters()

    /// The PHYs `--connect-phy` names, LE 1M when it names none.
    var connectPHYs: Set<PHY> { connectPhy.isEmpty ? [.le1M] : Set(connectPhy) }

    func validate() throws {
        if peers.isEmpty == (name == nil) { throw ValidationError("give either a peer address or --name NAME") }
        try validatePrimaryPHYs(connectPHYs, "--connect-phy")
        guard connectTimeout > 0, connectTimeout.isFinite else { throw ValidationError("--connect-timeout must be positive") }
    }
}

/// How the gatt client commands use ATT: BlueZ's `[GATT] ExchangeMTU` and `Channels`, per command.
struct GATTClientOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The ATT_MTU to offer in Exchange MTU, 23 to 517 (gatttool's --mtu); the link uses the smaller of ours and the peer's.",
                               valueName: "OCTETS"))
    var attMTU: Int = 517

    @Option(help: ArgumentHelp("Open this many enhanced ATT bearers (EATT, 1 to 5) once connected, encrypting the link from the bond or pairing first; operations then run on them side by side. A peer without EATT keeps the one ATT bearer.",
                               valueName: "N"))
    var eatt: Int?

    @Option(help: ArgumentHelp("Once connected, ask for this PHY both ways: 1m, 2m or coded (repeatable: any of them). The link moves to what both controllers allow.",
                               valueName: "PHY"), transform: parsePHY)
    var phy: [PHY] = []

    @Option(help: ArgumentHelp("Once connected, send link-layer PDUs of up to this many octets, 27 to 251 (LE Set Data Length; the peer chooses what it sends). Says the lengths in force after.",
                               valueName: "OCTETS"))
    var dataLength: Int?

    func validate() throws {
        try validateATTMTU(attMTU)
        if let eatt, !(1...5).contains(eatt) { throw ValidationError("--eatt must be 1 to 5, not \(eatt)") }
        if let dataLength, !(27...251).contains(dataLength) { throw ValidationError("--data-length must be 27 to 251, not \(dataLength)") }
    }
}

/// A `--phy` value: 1m, 2m or coded.
func parsePHY(_ s: String) throws -> PHY {
    switch s.lowercased() {
    case "1m": return .le1M
    case "2m": return .le2M
    case "coded": return .leCoded
    default: throw ValidationError("bad PHY '\(s)': 1m, 2m or coded")
    }
}

/// `--att-mtu` of the gatt commands: what an ATT_MTU can be (Vol 3 Part F §3.2.8: at
/// least 23; an attribute value is at most 512 octets, so 517 carries any in one PDU).
func validateATTMTU(_ mtu: Int) throws {
    guard (23...517).contains(mtu) else { throw ValidationError("--att-mtu must be 23 to 517, not \(mtu)") }
}

/// Which attribute a command acts on.
struct AttributeOptions: ParsableArguments {
    @Option(name: .customLong("handle"), help: "Attribute handle (decimal or 0x hex); 'read' takes several, read together.", transform: { s in
        guard let v = cliUInt16(s) else { throw ValidationError("bad handle '\(s)'") }
        return v
    })
    var handles: [UInt16] = []
    /// The one `--handle` (`requireOne` checks there is at most one).
    var handle: UInt16? { handles.first }

    @Option(help: "Characteristic UUID (16-bit like 2A19, or 128-bit); the first match is used.", transform: { s in
        guard let u = BluetoothUUID(s) else { throw ValidationError("bad UUID '\(s)'") }
        return u
    })
    var uuid: BluetoothUUID?

    /// Exactly one of --handle and --uuid (each command's `validate` calls it: `subscribe
    /// --all` takes neither).
    func requireOne(severalHandles: Bool = false) throws {
        if handles.isEmpty == (uuid == nil) { throw ValidationError("give either --handle or --uuid") }
        if handles.count > 1, !severalHandles { throw ValidationError("give one --handle") }
    }
}

/// A link to one peer through the facade: what `btctl gatt` (discover, read, write,
/// subscribe), `btctl pair` and `btctl l2cap connect` do first. The host starts on the
/// controller, finds the peer (by address, or by scanning for its name), connects as
/// central with a timeout (LE Create Connection Cancel when it passes) and exchanges the
/// MTU; operations that the peer refuses for the link's security encrypt from the bond
/// or pair, with the pairing options given (`PairingOptions`), as the facade does for
/// any application. On SIGINT/SIGTERM the host shuts down (the link ends with a
/// Disconnect, not with the process).
struct PeerSession {
    let host: BluetoothHost
    let peripheral: RemotePeripheral
    let json: Bool
    /// The host's pairings and bond changes, shown before the `secured` a command reports.
    let feed: SecurityFeed?

    /// `answers` takes the prompts' answers instead of standard input (`l2cap connect`
    /// gives a closed one: its standard input is the channel's).
    /// With `gatt.eatt`, enhanced ATT bearers are opened once connected (`openEnhancedBearers`).
    static func open(_ options: ControllerOptions, _ peer: PeerOptions, _ pairing: PairingOptions? = nil, gatt: GATTClientOptions? = nil,
                     answers: ConsoleAnswers? = nil) async throws -> (PeerSession, TraceFileWriter?) {
        let store = AdapterBondStore(path: pairing?.store.bonds)
        let security = pairing?.securityOptions(store: store, json: options.json, answers: answers) ?? SecurityOptions()
        let (host, writer) = try await options.openHost(security: security, attMTU: UInt16(gatt?.attMTU ?? 517))
        let json = options.json
        let feed = await SecurityFeed.following(host) { announce(json: json, $0, "btctl: " + $1) }
        do {
            store.bind(adapter: try await host.start().address)
            let limit = cliDuration(seconds: peer.connectTimeout)
            let peripheral: RemotePeripheral
            if peer.peers.count > 1 {
                peripheral = try await host.central.connect(toAnyOf: peer.peers, within: limit, parameters: peer.connectionParameters, phys: peer.connectPHYs)
                let c = peripheral.connection
                announce(json: options.json, [("event", .string("connected")), ("handle", .int(Int(c.handle))),
                                              ("peer", .string(DeviceAddress(c.peer, type: c.peerType).description))],
                         "btctl: connected to \(DeviceAddress(c.peer, type: c.peerType))")
            } else if let p = peer.peers.first {
                peripheral = try await host.central.connect(to: p.address, type: p.type, within: limit, parameters: peer.connectionParameters, phys: peer.connectPHYs)
            } else {
                let name = peer.name ?? ""
                guard let found = try await host.central.first(matching: ScanFilter(names: [name]), within: limit, phys: peer.connectPHYs) else {
                    throw CLIError("no device named '\(name)' advertised within \(secondsText(peer.connectTimeout))")
                }
                peripheral = try await host.central.connect(to: found, within: limit, parameters: peer.connectionParameters)
            }
            let session = PeerSession(host: host, peripheral: peripheral, json: options.json, feed: feed)
            if let count = gatt?.eatt { try await session.openEnhancedBearers(count) }
            if let phys = gatt?.phy, !phys.isEmpty { try await session.updatePHY(Set(phys)) }
            if let octets = gatt?.dataLength { try await session.updateDataLength(octets) }
            return (session, writer)
        } catch {
            await host.close()
            writer?.close()
            throw error
        }
    }

    /// Ends the link (what was sent last goes out first) and closes the host.
    func close() async {
        _ = try? await peripheral.disconnect()
        await host.close()
    }

    /// Runs a facade operation and reports the link's security when the operation
    /// changed it (the peer refused for security, and the link was encrypted from the
    /// bond or paired): `{"event":"secured",...}` with --json, a note on stderr otherwise.
    func reportingSecurity<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let before = await peripheral.security
        do {
            let result = try await body()
            await reportSecurity(since: before, "the peer asked for security: link")
            return result
        } catch {
            await reportSecurity(since: before, "the peer asked for security: link")
            throw error
        }
    }

    /// Brings the link to `level` before anything else is asked of the peer (`l2cap
    /// connect --security`, as l2test's -E/-A): encrypts from the bond or pairs, and
    /// reports it as `reportingSecurity` does. Throws `CLIError` when the link cannot
    /// get there (the pairing failed, or gave a lower level).
    func secure(_ level: SecurityLevel) async throws {
        let before = await peripheral.security
        do { try await peripheral.secure(level: level) } catch { throw CLIError("cannot secure the link to \(level): \(error)") }
        await reportSecurity(since: before, "link secured:")
    }

    /// Opens `count` enhanced ATT bearers (`--eatt`), as bluetoothd does with `[GATT]
    /// Channels`: an enhanced bearer's channel shall be encrypted (Vol 3 Part G §5.3.2),
    /// so the link is encrypted from the bond or paired first, reported as `secured`;
    /// then `{"event":"eatt",...}` says how many are open. A peer whose GATT server does
    /// not take EATT keeps the one ATT bearer, and the command goes on (`bearers` 0, and
    /// why). Throws `CLIError` when the link cannot be encrypted or the channels fail.
    func openEnhancedBearers(_ count: Int) async throws {
        let before = await peripheral.security
        let link: (String, JSONValue) = ("handle", .int(Int(peripheral.connection.handle)))
        do {
            let open = try await peripheral.openEnhancedBearers(count: count)
            await reportSecurity(since: before, "link secured for EATT:")
            if json { emit(.object([("event", .string("eatt")), link, ("bearers", .int(open))])) } else { note("\(open) enhanced ATT bearer\(open == 1 ? "" : "s") open") }
        } catch let BLEError.notSupported(why) {
            if json { emit(.object([("event", .string("eatt")), link, ("bearers", .int(0)), ("error", .string(why))])) } else { note("no enhanced ATT bearers: \(why); the one ATT bearer carries everything") }
        } catch {
            await reportSecurity(since: before, "link secured for EATT:")
            throw CLIError("cannot open enhanced ATT bearers: \(error)")
        }
        fflush(nil)
    }

    /// Asks for `phys` both ways (`--phy`) and says what the link uses after.
    /// `report` says it (by default an event with --json, else a note on standard error).
    func updatePHY(_ phys: Set<PHY>, report: ((_ o: [(String, JSONValue)], _ text: String) -> Void)? = nil) async throws {
        let say = report ?? { announce(json: json, $0, "btctl: " + $1) }
        let link: (String, JSONValue) = ("handle", .int(Int(peripheral.connection.handle)))
        do {
            if let p = try await peripheral.updatePHY(tx: phys, rx: phys) {
                say([("event", .string("phy")), link, ("tx", .string(p.tx.description)), ("rx", .string(p.rx.description))], "PHY \(p)")
            } else {
                let why = "the controller or the peer does not update the PHY"
                say([("event", .string("phy")), link, ("error", .string(why))], "the PHY stays: \(why)")
            }
        } catch {
            throw CLIError("cannot update the PHY: \(error)")
        }
    }

    /// Asks to send PDUs of up to `octets` (`--data-length`) and says the lengths in
    /// force after. The time allowed is the most the spec does (17040 µs): the octets
    /// take what they take on the link's PHY.
    /// `report` says it, as for `updatePHY`.
    func updateDataLength(_ octets: Int, report: ((_ o: [(String, JSONValue)], _ text: String) -> Void)? = nil) async throws {
        let say = report ?? { announce(json: json, $0, "btctl: " + $1) }
        let link: (String, JSONValue) = ("handle", .int(Int(peripheral.connection.handle)))
        do {
            if let d = try await peripheral.updateDataLength(txOctets: octets, txTime: 17040) {
                say([("event", .string("data_length")), link, ("tx_octets", .int(d.maxTxOctets)), ("tx_time", .int(d.maxTxTimeMicroseconds)),
                     ("rx_octets", .int(d.maxRxOctets)), ("rx_time", .int(d.maxRxTimeMicroseconds))],
                    "data length \(d)")
            } else {
                let why = "the controller does not set a link's data length"
                say([("event", .string("data_length")), link, ("error", .string(why))], "the data length stays: \(why)")
            }
        } catch {
            throw CLIError("cannot update the data length: \(error)")
        }
    }

    /// Shows the pairings the operation set off (`SecurityFeed`), then `secured` with
    /// the link's state when the operation changed it.
    private func reportSecurity(since before: LinkSecurityState, _ text: String) async {
        feed?.show()
        let s = await peripheral.security
        guard s != before, s.encrypted else { return }
        if json {
            emit(.object([("event", .string("secured")), ("handle", .int(Int(peripheral.connection.handle))), ("level", .string(s.level.description)), ("key_size", .int(s.keySize)), ("bonded", .bool(s.bonded))]))
        } else {
            note("\(text) \(s)")
        }
    }

    /// Every service, characteristic and descriptor (from the bond's stored layout while
    /// the peer's Database Hash matches it, else discovered).
    func discoverAll() async throws -> [RemoteService] {
        try await reportingSecurity { try await peripheral.discoverServices() }
    }

    /// Every include declaration, each with the service it includes (secondary
    /// services are found only this way).
    func includes() async throws -> [RemoteInclude] {
        try await reportingSecurity { try await peripheral.includes() }
    }

    /// The handle an `AttributeOptions` names: `--handle` as given, `--uuid` resolved by discovery.
    func valueHandle(_ a: AttributeOptions) async throws -> UInt16 {
        if let h = a.handle { return h }
        guard let c = try await characteristic(a) else { throw CLIError("no characteristic \(a.uuid?.description ?? "")") }
        return c.valueHandle
    }

    /// The characteristic an `AttributeOptions` names (by value handle or UUID), with its descriptors.
    func characteristic(_ a: AttributeOptions) async throws -> RemoteCharacteristic? {
        for s in try await discoverAll() {
            for c in s.characteristics where (a.uuid.map { $0 == c.uuid } ?? false) || a.handle == c.valueHandle { return c }
        }
        return nil
    }
}

func propertyNames(_ p: CharacteristicProperties) -> [String] { p.names }

/// A value as btctl prints it: `0xHANDLE: hex  "text"` (text only when printable), or
/// `0xHANDLE: hex  87 %` when the characteristic is one whose format btctl knows.
func valueLine(_ handle: UInt16, _ v: [UInt8], uuid: BluetoothUUID? = nil) -> String {
    let shown = uuid.flatMap { CharacteristicFormatter.describe(v, of: $0) } ?? valueText(v).map { "\"\($0)\"" }
    return "0x\(hex4(handle)): \(v.hexString)\(shown.map { "  " + $0 } ?? "")"
}

/// A value as JSON fields: handle, hex value, text when printable, the formatted value
/// for a known characteristic, and its UUID and name when known.
func valueJSON(_ handle: UInt16, _ v: [UInt8], uuid: BluetoothUUID? = nil) -> [(String, JSONValue)] {
    var o: [(String, JSONValue)] = [("handle", .int(Int(handle)))] + valueFields(v, uuid: uuid)
    if let uuid {
        o.append(("uuid", .string(uuid.description)))
        o += nameField(uuid)
    }
    return o
}

/// The value's own JSON fields: hex, text when printable, formatted when the
/// characteristic is one btctl knows.
func valueFields(_ v: [UInt8], uuid: BluetoothUUID?) -> [(String, JSONValue)] {
    var o: [(String, JSONValue)] = [("value", .string(v.hexString))]
    if let t = valueText(v) { o.append(("text", .string(t))) }
    if let f = uuid.flatMap({ CharacteristicFormatter.describe(v, of: $0) }) { o.append(("formatted", .string(f))) }
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
