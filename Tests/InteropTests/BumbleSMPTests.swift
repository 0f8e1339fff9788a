// Our Security Manager against Bumble's (bumble.smp with PairingConfig and a
// PairingDelegate), both hosts on Rootcanal, in both roles: LE Secure Connections
// and legacy pairing, Just Works and Passkey Entry with a fixed passkey on Bumble's
// side, bonding, then a second link encrypted from the stored keys without
// pairing; a wrong passkey fails with Confirm Value Failed on both sides; a
// characteristic that needs authentication reads only after pairing.

import ATT
import BLETesting
import Foundation
import GAP
import GATT
import HCI
import L2CAP
import Logging
import SMP
import Snoop
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleSMPTests {
    static let bumble = BluetoothAddress("F1:F2:F3:F4:F5:F6")!

    struct Peer {
        let process: Process
        let out: Pipe
        func events() async -> [[String: Any]] {
            _ = await Interop.exit(of: process)
            return await BumbleL2CAPTests.lines(out)
        }
    }

    static func launch(_ python: String, _ port: UInt16, _ args: [String]) throws -> Peer {
        let (p, out) = try Interop.launchBumble(python, "bumble_smp_peer.py", port: port, args)
        return Peer(process: p, out: out)
    }

    static func host(_ port: UInt16, _ config: PairingConfiguration, delegate: any PairingDelegate = AutomaticPairingDelegate(), record: String? = nil)
        async throws -> (HCIController, L2CAPHost, SecurityManager, ControllerInfo)
    {
        let (controller, l2cap, info): (HCIController, L2CAPHost, ControllerInfo)
        if let record {
            let transport = RecordingTransport(wrapping: try StreamTransports.tcp(host: "127.0.0.1", port: port, logger: Interop.logger), writer: try TraceFileWriter(path: record))
            controller = HCIController(transport: transport, logger: Interop.logger)
            info = try await controller.initialize()
            l2cap = L2CAPHost(controller: controller, logger: Interop.logger)
            await l2cap.start()
        } else {
            (controller, l2cap, info) = try await BumbleL2CAPTests.host(port)
        }
        let security = SecurityManager(l2cap: l2cap, configuration: config, delegate: delegate, logger: Interop.logger)
        await security.start()
        return (controller, l2cap, security, info)
    }

    static func named(_ events: [[String: Any]], _ name: String) -> [[String: Any]] { events.filter { $0["event"] as? String == name } }

    /// We are central: pair with Bumble's peripheral, read its protected characteristic,
    /// reconnect and encrypt from the bond.
    func centralPairsAndReEncrypts(sc: Bool, mitm: Bool, bumbleIO: String, ours: PairingConfiguration, passkey: UInt32?, fixture: String? = nil) async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let trace = fixture.map { _ in FileManager.default.temporaryDirectory.appendingPathComponent("smp-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).btsnoop").path }
        defer { if let trace { try? FileManager.default.removeItem(atPath: trace) } }
        let (controller, l2cap, security, _) = try await Self.host(rc.hciPort, ours, delegate: AutomaticPairingDelegate(passkey: passkey), record: trace)
        let peer = try Self.launch(python, rc.hciPort, ["peripheral", sc ? "1" : "0", mitm ? "1" : "0", bumbleIO, "123456"])
        defer { RootcanalProcess.kill(peer.process) }

        let link = try await TestCentral.connect(to: Self.bumble, type: .random, host: l2cap, within: .seconds(20))
        let client = GATTClient(bearer: ATTBearer(channel: L2CAPATTChannel(host: l2cap, handle: link.handle), logger: Interop.logger))
        await client.start()
        let chars = try await client.discoverAll().flatMap(\.1).map(\.0)
        let protected = try #require(chars.first { $0.uuid == BluetoothUUID("3f3e0002-0000-1000-8000-00805f9b34fb") })
        // Before pairing Bumble refuses the read.
        await #expect(throws: GATTClientError.self) { _ = try await client.read(protected.valueHandle) }
        let level: SecurityLevel = mitm ? .authenticated : .encrypted
        let state = try await security.secure(handle: link.handle, level: level)
        #expect(state.encrypted && state.secureConnections == sc && state.authenticated == mitm)
        #expect(state.bonded)
        // Now the read succeeds (Bumble's READ_REQUIRES_AUTHENTICATION asks for a paired
        // link, Just Works included). The round trip also lets Bumble finish storing
        // the keys before we disconnect.
        #expect(try await client.read(protected.valueHandle) == [0x42, 0x43])
        let bonds = try await security.bonds()
        // Bumble distributes its IRK and identity (its controller's public address);
        // the bond also knows the static random address it connected with.
        #expect(bonds.count == 1, "\(bonds)")
        #expect(bonds.first?.keys.peerIdentity != nil)
        #expect(bonds.first?.matches(Self.bumble, type: .random) == true, "\(bonds)")
        try await controller.send(Disconnect(connectionHandle: link.handle))

        // Second link: encrypted from the bond, no pairing.
        let again = try await TestCentral.connect(to: Self.bumble, type: .random, host: l2cap, within: .seconds(20))
        let reencrypted = try await security.secure(handle: again.handle, level: level)
        #expect(reencrypted.encrypted && reencrypted.authenticated == mitm && reencrypted.bonded)
        try await controller.send(Disconnect(connectionHandle: again.handle))
        let bumble = await peer.events()
        #expect(Self.named(bumble, "paired").count == 1, "\(bumble)")
        #expect(Self.named(bumble, "encryption").count == 2, "\(bumble)")
        #expect(Self.named(bumble, "pairing-failure").isEmpty, "\(bumble)")
        await controller.close()
        if let trace, let fixture {
            try await SMPTraceTests.compareWithTshark(trace)
            if let keep = ProcessInfo.processInfo.environment["BLE_RECORD_FIXTURES"] {
                try? FileManager.default.removeItem(atPath: keep + "/" + fixture)
                try FileManager.default.copyItem(atPath: trace, toPath: keep + "/" + fixture)
            }
        }
    }

    @Test func secureConnectionsJustWorksAsCentral() async throws {
        try await centralPairsAndReEncrypts(sc: true, mitm: false, bumbleIO: "none", ours: PairingConfiguration(), passkey: nil)
    }

    @Test func secureConnectionsPasskeyAsCentral() async throws {
        try await centralPairsAndReEncrypts(sc: true, mitm: true, bumbleIO: "display",
                                            ours: PairingConfiguration(ioCapability: .keyboardOnly, mitm: true), passkey: 123_456,
                                            fixture: "rootcanal-smp-sc-passkey.btsnoop")
    }

    @Test func legacyPasskeyAsCentral() async throws {
        try await centralPairsAndReEncrypts(sc: false, mitm: true, bumbleIO: "display",
                                            ours: PairingConfiguration(ioCapability: .keyboardOnly, mitm: true, secureConnections: false), passkey: 123_456,
                                            fixture: "rootcanal-smp-legacy-passkey.btsnoop")
    }

    @Test func legacyJustWorksAsCentral() async throws {
        try await centralPairsAndReEncrypts(sc: false, mitm: false, bumbleIO: "none", ours: PairingConfiguration(secureConnections: false), passkey: nil)
    }

    @Test func aWrongPasskeyFailsOnBothSides() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (controller, l2cap, security, _) = try await Self.host(rc.hciPort, PairingConfiguration(ioCapability: .keyboardOnly, mitm: true),
                                                                   delegate: AutomaticPairingDelegate(passkey: 111_111))
        let peer = try Self.launch(python, rc.hciPort, ["peripheral", "1", "1", "display", "123456"])
        defer { RootcanalProcess.kill(peer.process) }
        let link = try await TestCentral.connect(to: Self.bumble, type: .random, host: l2cap, within: .seconds(20))
        await #expect(throws: SecurityError.pairing(.remote(.confirmValueFailed))) {
            try await security.secure(handle: link.handle, level: .authenticated)
        }
        #expect(try await security.bonds().isEmpty)
        try await controller.send(Disconnect(connectionHandle: link.handle))
        RootcanalProcess.kill(peer.process)
        let bumble = await peer.events()
        // Bumble checked our confirm and sent Pairing Failed (0x04).
        #expect(Self.named(bumble, "pairing-failure").first?["reason"] as? Int == 0x04, "\(bumble)")
        await controller.close()
    }

    /// We are peripheral: Bumble pairs, disconnects, reconnects and encrypts from
    /// its stored keys; our LTK request answers come from our bond store.
    func peripheralIsPairedAndReEncrypted(sc: Bool, mitm: Bool, bumbleIO: String, ours: PairingConfiguration) async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (controller, l2cap, security, info) = try await Self.host(rc.hciPort, ours, delegate: AutomaticPairingDelegate(passkey: 123_456))
        let events = await security.events()
        try await controller.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await controller.send(LESetAdvertisingEnable(advertisingEnable: true))
        let peer = try Self.launch(python, rc.hciPort, ["central", sc ? "1" : "0", mitm ? "1" : "0", bumbleIO, "123456", info.address.description])
        defer { RootcanalProcess.kill(peer.process) }
        // When the first link ends Bumble connects again: advertise again.
        let links = await l2cap.linkEvents()
        let readvertise = Task {
            for await e in links { if case .disconnected = e { _ = try? await controller.send(LESetAdvertisingEnable(advertisingEnable: true)) } }
        }
        defer { readvertise.cancel() }
        // First link: an encryption change, then the pairing; then the second link's change.
        let seen = await collect(events.filter {
            switch $0 {
            case .paired, .securityChanged, .pairingFailed: return true
            default: return false
            }
        }, count: 3, within: .seconds(40))
        var changes: [LinkSecurityState] = []
        var results: [PairingResult] = []
        for e in seen {
            switch e {
            case let .paired(_, _, r): results.append(r)
            case let .securityChanged(_, s): changes.append(s)
            case let .pairingFailed(_, _, err): Issue.record("pairing failed: \(err)")
            default: break
            }
        }
        #expect(results.count == 1)
        #expect(results.first?.security.secureConnections == sc && results.first?.security.authenticated == mitm)
        #expect(changes.count == 2 && changes.allSatisfy(\.encrypted))
        #expect(changes.last?.bonded == true && changes.last?.authenticated == mitm)
        let bumble = await peer.events()
        #expect(Self.named(bumble, "secured").compactMap { $0["encrypted"] as? Bool } == [true, true], "\(bumble)")
        #expect(Self.named(bumble, "error").isEmpty, "\(bumble)")
        await controller.close()
    }

    @Test func secureConnectionsPasskeyAsPeripheral() async throws {
        // We display the fixed passkey Bumble types.
        try await peripheralIsPairedAndReEncrypted(sc: true, mitm: true, bumbleIO: "keyboard",
                                                   ours: PairingConfiguration(ioCapability: .displayOnly, mitm: true, passkey: 123_456))
    }

    @Test func legacyJustWorksAsPeripheral() async throws {
        try await peripheralIsPairedAndReEncrypted(sc: false, mitm: false, bumbleIO: "none", ours: PairingConfiguration(secureConnections: false))
    }

    @Test func secureConnectionsNumericComparisonAsPeripheral() async throws {
        try await peripheralIsPairedAndReEncrypted(sc: true, mitm: true, bumbleIO: "display-yes-no",
                                                   ours: PairingConfiguration(ioCapability: .displayYesNo, mitm: true))
    }
}

/// Our decode of SMP frames in captures of real pairings, field by field against
/// tshark's: with Bumble (recorded from the sessions above) and with the Linux
/// kernel's SMP, BlueZ's (recorded in the QEMU guest by KernelSMPTests). All are
/// committed under Fixtures/.
@Suite(.liveTimeLimit) struct SMPTraceTests {
    static func compareWithTshark(_ path: String) async throws {
        guard let tshark = try Interop.tshark() else { return }
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: path))))
        var decoder = FrameDecoder(showKeys: true)
        let ours = trace.records.enumerated().map { decoder.decode($1, number: $0 + 1, firstTimestamp: 0).json }
        let fields = ["frame.number", "btsmp.opcode", "btsmp.io_capability", "btsmp.max_enc_key_size", "btsmp.reason", "btsmp.long_term_key", "btsmp.bd_addr",
                      "btsmp.id_resolving_key", "btsmp.signature_key", "btsmp.ediv"]
        let out = try await Interop.run(tshark, ["-r", path, "-Y", "btsmp", "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"] + fields.flatMap { ["-e", $0] })
        let rows = out.split(separator: "\n").map { $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init) }
        // A PDU over several ACL packets is decoded at its last fragment; its first is only named.
        let smpFrames = ours.filter { $0["smp_opcode"] != nil && $0["l2cap_fragment"] == nil }
        #expect(rows.count == smpFrames.count && rows.count >= 8, "tshark SMP frames \(rows.count), ours \(smpFrames.count)")
        func num(_ s: String) -> Int? { s.hasPrefix("0x") ? Int(s.dropFirst(2), radix: 16) : Int(s) }
        #expect(rows.allSatisfy { $0.count == fields.count }, "tshark printed rows of another shape")
        // In order, and in the same frames: tshark also shows a reassembled PDU at its last fragment.
        for (row, j) in zip(rows, smpFrames) where row.count == fields.count {
            let n = row[0]
            #expect(j["frame"] == num(n).map(JSONValue.int), "frame \(n)")
            #expect(j["smp_opcode"] == num(row[1]).map(JSONValue.int), "frame \(n)")
            #expect(j["smp_error"] == nil, "frame \(n)")
            guard case let .object(params)? = j["params"] else { continue }
            let p = Dictionary(params, uniquingKeysWith: { a, _ in a })
            if let io = num(row[2]) { #expect(p["io_capability"] == .string(IOCapability(rawValue: UInt8(io)).description), "frame \(n)") }
            if let size = num(row[3]) { #expect(p["max_key_size"] == .int(size), "frame \(n)") }
            if let reason = num(row[4]) { #expect(p["reason"] == .int(reason), "frame \(n)") }
            // tshark prints the key bytes in wire order; we print them as the spec writes them.
            for (column, name) in [(5, "ltk"), (7, "irk"), (8, "csrk")] where !row[column].isEmpty {
                let wire = row[column].replacingOccurrences(of: ":", with: "")
                let ourKey = { if case let .string(s)? = p[name] { return s }; return "" }()
                #expect(Array(wire.utf8.chunked()).reversed().joined() == ourKey, "frame \(n) \(name)")
            }
            if !row[6].isEmpty { #expect(p["address"] == .string(row[6].uppercased()), "frame \(n)") }
            if let ediv = num(row[9]) {
                let ours = { if case let .string(s)? = p["ediv"] { return num(s) }; return nil }()
                #expect(ours == ediv, "frame \(n) ediv")
            }
        }
    }

    @Test(arguments: ["rootcanal-smp-sc-passkey.btsnoop", "rootcanal-smp-legacy-passkey.btsnoop",
                      "kernel-smp-sc-passkey.btsnoop", "kernel-smp-legacy-passkey.btsnoop", "android-smp-legacy.btsnoop"])
    func fixturesAgreeWithTshark(fixture: String) async throws {
        try await Self.compareWithTshark(Interop.root + "/Fixtures/" + fixture)
    }
}

extension Sequence where Element == UInt8 {
    /// Hex text split into two-character octets.
    func chunked() -> [String] {
        var out: [String] = []
        var current: [UInt8] = []
        for c in self {
            current.append(c)
            if current.count == 2 { out.append(String(decoding: current, as: UTF8.self)); current = [] }
        }
        return out
    }
}

extension BumbleSMPTests {
    /// Cross-transport key derivation (§2.4.2.4) against Bumble's: both sides ask for
    /// LinkKey; after Secure Connections pairing our bond's link key equals the one
    /// Bumble derived, with h6 (Bumble without CT2) and with h7 (both sides CT2).
    @Test(arguments: ["h6", "h7"]) func theLinkKeyIsDerivedAsBumbleDerivesIt(function: String) async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (controller, l2cap, security, _) = try await Self.host(rc.hciPort, PairingConfiguration(deriveLinkKey: true))
        let peer = try Self.launch(python, rc.hciPort, ["peripheral-ctkd", "1", "0", "none", "0", function])
        defer { RootcanalProcess.kill(peer.process) }
        let link = try await TestCentral.connect(to: Self.bumble, type: .random, host: l2cap, within: .seconds(20))
        let result = try await security.pair(handle: link.handle)
        #expect(result.security.secureConnections)
        let ours = try #require(result.keys.linkKey, "no link key derived")
        #expect(try await security.bonds().first?.keys.linkKey == ours)
        try await controller.send(Disconnect(connectionHandle: link.handle))
        RootcanalProcess.kill(peer.process)
        let bumble = await peer.events()
        await controller.close()
        let paired = try #require(Self.named(bumble, "paired").first, "\(bumble)")
        // Bumble prints its key's bytes as held, least significant first, as we keep ours.
        #expect(paired["link_key"] as? String == ours.map { String(format: "%02x", $0) }.joined(), "\(bumble)")
    }
}

extension BumbleSMPTests {
    /// OOB pairing against Bumble's (PairingConfig.OobConfig), we as central: for
    /// Secure Connections Bumble holds our OOB data (random and confirm), so it checks
    /// our public key against the confirm and uses our random; for legacy pairing both
    /// hold the same TK. Either way no prompt, an authenticated key, and Bumble's
    /// characteristic that needs authentication reads.
    @Test(arguments: [true, false]) func outOfBandAsCentral(secureConnections sc: Bool) async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let tk: [UInt8] = [0x3c, 0x1a, 0x77, 0x09, 0x51, 0xe2, 0x6b, 0x80, 0x14, 0xfd, 0x2a, 0x93, 0x66, 0xc7, 0x05, 0xb8]
        let (controller, l2cap, security, info) = try await Self.host(rc.hciPort, PairingConfiguration(secureConnections: sc))
        let ours = try LocalOOBData(address: info.address, addressType: .public)
        await security.setConfiguration(PairingConfiguration(mitm: true, secureConnections: sc,
                                                             oob: OOBConfiguration(local: ours, legacyTemporaryKey: sc ? nil : tk)))
        let hex = { (b: [UInt8]) in b.map { String(format: "%02x", $0) }.joined() }
        let peer = try Self.launch(python, rc.hciPort, ["peripheral-oob", sc ? "1" : "0", "1", "none", "0",
                                                         hex(ours.shared.random), hex(ours.shared.confirm), hex(tk)])
        defer { RootcanalProcess.kill(peer.process) }
        let link = try await TestCentral.connect(to: Self.bumble, type: .random, host: l2cap, within: .seconds(20))
        let events = await security.events()
        let result = try await security.pair(handle: link.handle, level: .authenticated)
        #expect(result.method == .outOfBand && result.security.authenticated && result.security.secureConnections == sc)
        let prompts = await collect(events.filter { if case .prompt = $0 { return true }; return false }, count: 1, within: .milliseconds(100))
        #expect(prompts.isEmpty)
        let client = GATTClient(bearer: ATTBearer(channel: L2CAPATTChannel(host: l2cap, handle: link.handle), logger: Interop.logger))
        await client.start()
        let chars = try await client.discoverAll().flatMap(\.1).map(\.0)
        let protected = try #require(chars.first { $0.uuid == BluetoothUUID("3f3e0002-0000-1000-8000-00805f9b34fb") })
        #expect(try await client.read(protected.valueHandle) == [0x42, 0x43])
        try await controller.send(Disconnect(connectionHandle: link.handle))
        RootcanalProcess.kill(peer.process)
        let bumble = await peer.events()
        await controller.close()
        let paired = try #require(Self.named(bumble, "paired").first, "\(bumble)")
        #expect(paired["authenticated"] as? Bool == true, "\(bumble)")
        #expect(Self.named(bumble, "pairing-failure").isEmpty, "\(bumble)")
    }
}
