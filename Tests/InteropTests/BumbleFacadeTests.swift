// The BLE facade against Bumble (a host nobody here wrote), on Rootcanal, in both
// roles: Bumble's fire-alarm receiver (bumble_firealarm_receiver.py) against our
// FireAlarmSender, and our central against Bumble's GATT server, including what
// happens to a subscription when the link goes; a bonded Bumble central's
// subscription restored by our peripheral when it encrypts its next link.

import BLE
import BLETesting
import FireAlarm
import Foundation
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleFacadeTests {
    @Test func bumbleReceiverAgainstOurFireAlarmSender() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        let info = try await host.start()
        let sender = FireAlarmSender(host: host, name: "FireAlarm-Bumble", log: { _ in })
        try await sender.start()
        let alarm = Task {
            guard await sender.waitForSubscriber(within: .seconds(30)) else { return [Connection]() }
            return try await sender.raiseAlarm()
        }
        let out = try await Interop.execute(python, [Interop.root + "/Tests/InteropTests/bumble_firealarm_receiver.py", String(rc.hciPort),
                                               info.address.description], timeout: 60, mergeStderr: true).out
        let lines = out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        func event(_ e: String) -> [String: Any]? { lines.first { $0["event"] as? String == e } }
        #expect(event("connected")?["mtu"] as? Int == 247, "\(out)")
        #expect(event("text")?["text"] as? String == FireAlarmProfile.defaultText)
        let plan = try #require(event("floor-plan"), "\(out)")
        #expect(plan["crc_ok"] as? Bool == true)
        #expect(plan["bytes"] as? Int == FireAlarmProfile.defaultFloorPlan.count)
        // Each notification filled Bumble's ATT_MTU − 3 = 244 bytes (the last one the rest).
        #expect(plan["pieces"] as? Int == (FireAlarmProfile.defaultFloorPlan.count + 243) / 244)
        #expect(event("done") != nil)
        // Bumble confirmed the indication, and its acknowledgement reached the sender.
        #expect(try await alarm.value.count == 1)
        // The write reaches the sender's event task after Bumble has printed "done".
        #expect(await sender.waitForAcknowledgement(within: .seconds(5)))
        #expect(await sender.acknowledgements == ["bumble"])
        await sender.stop()
        await host.close()
    }

    @Test func ourCentralAgainstBumblesServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let peripheral = Process()
        peripheral.executableURL = URL(fileURLWithPath: python)
        peripheral.arguments = [Interop.root + "/Tests/InteropTests/bumble_gatt_peripheral.py", String(rc.hciPort), "--discover-central"]
        let bumbleOut = Pipe()
        peripheral.standardOutput = bumbleOut
        peripheral.standardError = FileHandle.nullDevice
        try peripheral.run()
        defer { RootcanalProcess.kill(peripheral) }

        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        // Our central serves a database too; Bumble, the peripheral, discovers it.
        let mine = Service(uuid: BluetoothUUID(0xABCD), characteristics: [Characteristic(uuid: BluetoothUUID(0xABCE), properties: [.read], value: [1])])
        try await host.peripheral.add(mine)
        let bumble = BumbleGATTClientTests.bumble
        let found = try #require(await host.central.first(matching: ScanFilter(addresses: [bumble]), within: .seconds(20)))
        #expect(found.addressType == .random)
        let p = try await host.central.connect(to: found, within: .seconds(10))
        let s = try #require(try await p.discoverServices().first { $0.uuid == BluetoothUUID(0xFFF0) })
        func c(_ u: UInt16) throws -> RemoteCharacteristic {
            guard let found = s.characteristic(BluetoothUUID(u)) else { throw BLEError.notSupported("Bumble's FFF0 has no \(BluetoothUUID(u))") }
            return found
        }
        #expect(try await p.read(try c(0xFFF1)) == Array("bumble".utf8))
        #expect(try await p.read(try c(0xFFF4)) == (0..<200).map { UInt8($0) })
        try await p.write(Array("facade".utf8), to: try c(0xFFF1))
        #expect(try await p.read(try c(0xFFF1)) == Array("facade".utf8))
        // Several values at once (Read Multiple Variable Length, which Bumble's server has).
        #expect(try await p.read([try c(0xFFF4), try c(0xFFF1), try c(0xFFF2)]) == [(0..<200).map { UInt8($0) }, Array("facade".utf8), [1]])
        // Notifications to a callback on the host's loop; indications as a sequence.
        let (notified, notifiedIn) = AsyncStream<[UInt8]>.makeStream()
        try await p.subscribe(to: try c(0xFFF2), onValue: { notifiedIn.yield($0) })
        #expect(await firstElement(notified, within: .seconds(10)) == [0x42])
        let indicated = try await p.subscribe(to: try c(0xFFF3))
        enum Outcome: Sendable, Equatable { case value([UInt8]), finished, failed(BLEError), other(String) }
        let (outcomes, sink) = AsyncStream<Outcome>.makeStream()
        let consumer = Task {
            do {
                for try await v in indicated { sink.yield(.value(v)) }
                sink.yield(.finished)
            } catch let e as BLEError { sink.yield(.failed(e)) } catch { sink.yield(.other("\(error)")) }
            sink.finish()
        }
        defer { consumer.cancel() }
        var it = outcomes.makeAsyncIterator()
        #expect(await it.next() == .value([0x43, 0x43]))
        // The link goes mid-subscription: the sequence ends with the controller's reason, no hang.
        // (Killing Bumble's process instead leaves the link up in Rootcanal 1.10: it reports no
        // disconnection for a vanished device, so there would be nothing to end on.)
        #expect(try await p.disconnect() == .connectionTerminatedByLocalHost)
        let deadline = Task { try await Task.sleep(for: .seconds(20)); sink.finish() }
        defer { deadline.cancel() }
        let ended = await it.next()
        #expect(ended == .failed(.disconnected(reason: .connectionTerminatedByLocalHost)))
        #expect(await host.central.connectedPeripherals.isEmpty)
        await host.close()
        // Bumble, as GATT client on the same link, found our central's services and name.
        RootcanalProcess.kill(peripheral)
        let lines = String(decoding: await Interop.readAll(bumbleOut), as: UTF8.self)
            .split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let uuids = (lines.first { $0["event"] as? String == "central-services" }?["uuids"] as? [String]) ?? []
        #expect(uuids.contains { $0.contains("1800") } && uuids.contains { $0.contains("1801") } && uuids.contains { $0.contains("ABCD") }, "\(lines)")
        #expect(lines.first { $0["event"] as? String == "central-name" }?["name"] as? String == "swift-ble-host", "\(lines)")
    }

    /// Bumble's central pairs with bonding and subscribes to our Battery Level, leaves,
    /// comes back and only encrypts from its stored keys: our server puts its CCCD back
    /// (Vol 3, Part G, §3.3.3.3), so the notification we send reaches it although it
    /// wrote nothing on that link.
    @Test func aBondedBumbleCentralIsNotifiedWithoutSubscribingAgain() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger, security: SecurityOptions(random: .seeded(11)))
        let info = try await host.start()
        let level = Characteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [80])
        try await host.peripheral.add(Service(uuid: BluetoothUUID(0x180F), characteristics: [level]))
        let events = host.peripheral.events()
        try await host.peripheral.startAdvertising(AdvertisingData())
        let peer = try BumbleSMPTests.launch(python, rc.hciPort, ["central-subscribe", "1", "0", "none", "0", info.address.description])
        defer { RootcanalProcess.kill(peer.process) }
        // Bumble's CCCD write on the first link, its end with that link, then the
        // restore on the second.
        let subscribed = await collect(events.compactMap { e -> Bool? in
            if case let .subscriptionChanged(_, _, notify, _) = e { return notify }
            return nil
        }, count: 3, within: .seconds(40))
        #expect(subscribed == [true, false, true])
        let notified = try await host.peripheral.notify(level, value: [42])
        #expect(notified.count == 1)
        let bumble = await peer.events()
        let handle = try await host.peripheral.handles(of: level).value
        #expect(BumbleSMPTests.named(bumble, "subscribed").compactMap { $0["handle"] as? Int } == [Int(handle)], "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "secured").first?["encrypted"] as? Bool == true, "\(bumble)")
        let second = BumbleSMPTests.named(bumble, "notification").filter { $0["round"] as? Int == 1 }
        #expect(second.first?["handle"] as? Int == Int(handle) && second.first?["value"] as? String == "2a", "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "error").isEmpty, "\(bumble)")
        await host.close()
    }

    /// A bonded client is told what changed while it was away. Bumble's central pairs
    /// with bonding, subscribes to Service Changed and leaves; we add a service; it
    /// comes back and only encrypts from its stored keys: the Database Hash it knew is
    /// not ours any more, so our server indicates Service Changed at once (Vol 3,
    /// Part G, §7.1), for the handles of the service added while it was away (the
    /// server keeps its latest changes by the hash before each). Before, nothing came,
    /// and a client caching the layout used stale handles; then 0x0001–0xFFFF came.
    @Test func aBondedBumbleCentralIsToldTheDatabaseChangedWhileItWasAway() async throws {
        guard let (bumble, added) = try await Self.bondedCentralAfterAChange("central-service-changed", seed: 13) else { return }
        let subscribed = BumbleSMPTests.named(bumble, "subscribed").first?["handle"] as? Int
        let indication = BumbleSMPTests.named(bumble, "indication").first
        #expect(subscribed != nil && indication?["handle"] as? Int == subscribed, "\(bumble)")
        let range = [added.lowerBound, added.upperBound].map { String(format: "%02x%02x", $0 & 0xFF, $0 >> 8) }.joined()
        #expect(added.lowerBound > 1 && indication?["value"] as? String == range, "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "error").isEmpty, "\(bumble)")
    }

    /// A bonded client with robust caching (Client Supported Features bit 0, kept with
    /// its bond: §7.2) that comes back after the database changed is change-unaware
    /// (§2.5.2.1): its first read gets Database Out Of Sync (0x12); reading the Database
    /// Hash makes it aware, and the read goes through. Before, the features were
    /// forgotten with the link and the read answered as if nothing had changed.
    @Test func aBondedRobustCachingBumbleCentralIsChangeUnawareAfterAChange() async throws {
        let level = Characteristic(uuid: BluetoothUUID(0x2A19), properties: [.read], value: [80])
        guard let (bumble, _) = try await Self.bondedCentralAfterAChange("central-robust-caching", seed: 14, serving: [level]) else { return }
        let reads = BumbleSMPTests.named(bumble, "read")
        #expect(reads.first { $0["what"] as? String == "before" }?["error"] as? Int == 0x12, "\(bumble)")
        #expect((BumbleSMPTests.named(bumble, "hash").first?["values"] as? [String])?.first?.count == 32, "\(bumble)")
        #expect(reads.first { $0["what"] as? String == "after" }?["value"] as? String == "50", "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "error").isEmpty, "\(bumble)")
    }

    /// Runs a bonded Bumble central in `mode` (bumble_smp_peer.py) against our facade
    /// peripheral serving `serving` (in a Battery service), adds a service once the
    /// first link ends (the central waits 2 s before it comes back), and returns what
    /// the central printed and the added service's handles; nil when Rootcanal or
    /// Bumble is not there.
    static func bondedCentralAfterAChange(_ mode: String, seed: UInt64, serving: [Characteristic] = []) async throws
        -> (events: [[String: Any]], added: ClosedRange<UInt16>)? {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return nil }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger, security: SecurityOptions(random: .seeded(seed)))
        let info = try await host.start()
        if !serving.isEmpty { try await host.peripheral.add(Service(uuid: BluetoothUUID(0x180F), characteristics: serving)) }
        let links = host.connectionEvents()
        try await host.peripheral.startAdvertising(AdvertisingData())
        let peer = try BumbleSMPTests.launch(python, rc.hciPort, [mode, "1", "0", "none", "0", info.address.description])
        defer { RootcanalProcess.kill(peer.process) }
        let ended = await firstElement(links.filter { if case .disconnected = $0 { return true } else { return false } }, within: .seconds(40))
        try #require(ended != nil)
        let added = Characteristic(uuid: BluetoothUUID(0xFFE1), properties: [.read], value: [1])
        try await host.peripheral.add(Service(uuid: BluetoothUUID(0xFFE0), characteristics: [added]))
        // The service's declaration, the characteristic's, its value.
        let value = try await host.peripheral.handles(of: added).value
        let events = await peer.events()
        await host.close()
        return (events, (value - 2)...value)
    }

    /// Our SPSM asks for encryption; Bumble's central asks for a channel on an
    /// unencrypted link before and after it bonds. Without a bond the refusal is
    /// "insufficient authentication" (it must pair); bonded, "insufficient encryption"
    /// (it has a key to encrypt with: Vol 3, Part C, §10.3.1), and Bumble's
    /// l2cap.L2capError names each. Once encrypted, each link gets its channel.
    @Test func aBumbleCentralIsToldToPairThenToEncryptForAProtectedSPSM() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger, security: SecurityOptions(random: .seeded(12)))
        let info = try await host.start()
        let incoming = await host.publishChannel(spsm: 0x0085, security: ChannelSecurity(level: .encrypted))
        let accepted = Task { var n = 0; for await _ in incoming { n += 1; if n == 2 { break } }; return n }
        try await host.peripheral.startAdvertising(AdvertisingData())
        let peer = try BumbleSMPTests.launch(python, rc.hciPort, ["central-channel", "1", "0", "none", "0", info.address.description])
        defer { RootcanalProcess.kill(peer.process) }
        let bumble = await peer.events()
        let refused = BumbleSMPTests.named(bumble, "refused")
        #expect(refused.map { $0["round"] as? Int } == [0, 1] && refused.allSatisfy { $0["when"] as? String == "unencrypted" }, "\(bumble)")
        #expect(refused.map { $0["result"] as? Int } == [0x0005, 0x0008], "\(bumble)")
        #expect(refused.map { $0["name"] as? String } == ["CONNECTION_REFUSED_INSUFFICIENT_AUTHENTICATION", "CONNECTION_REFUSED_INSUFFICIENT_ENCRYPTION"], "\(bumble)")
        let opened = BumbleSMPTests.named(bumble, "channel")
        #expect(opened.map { $0["round"] as? Int } == [0, 1] && opened.allSatisfy { $0["when"] as? String == "encrypted" }, "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "error").isEmpty, "\(bumble)")
        #expect(await firstElement(AsyncStream<Int> { k in Task { k.yield(await accepted.value) } }, within: .seconds(5)) == 2)
        accepted.cancel()
        await host.close()
    }

    /// EATT, our server's side: Bumble's client reads Server Supported Features (EATT
    /// bit set); asking for enhanced bearers on the unencrypted link it is refused
    /// "insufficient authentication" (the channel shall be encrypted, Vol 3, Part G,
    /// §5.3.2); it pairs, opens two enhanced ATT bearers with one Credit Based
    /// Connection Request to SPSM 0x0027, reads on both at once, discovers services on
    /// one; Exchange MTU on an enhanced bearer is answered Request Not Supported.
    @Test func bumblesEATTClientAgainstOurServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let transport = try TransportSpec(parsing: rc.transportSpec).open(logger: Interop.logger)
        let host = BluetoothHost(transport: transport, logger: Interop.logger, enhancedATT: true)
        let info = try await host.start()
        let links = host.connectionEvents()
        let value = Characteristic(uuid: BluetoothUUID(0xEA01), properties: [.read], value: [0xE, 0xA, 0x77])
        try await host.peripheral.add(Service(uuid: BluetoothUUID(0xEA00), characteristics: [value]))
        try await host.peripheral.startAdvertising(AdvertisingData())
        try await Self.runBumblesEATTCentral(python, port: rc.hciPort, against: info.address.description)
        await host.close()
        // Each bearer was reported, with the ATT_MTU of its channel (at least 64).
        var accepted: [Int] = []
        for await e in links { if case let .enhancedBearerAccepted(_, mtu) = e { accepted.append(mtu) } }
        #expect(accepted.count == 2 && accepted.allSatisfy { $0 >= 64 }, "\(accepted)")
    }

    /// Runs bumble_eatt_central.py against the server at `address` (serving EA01 =
    /// 0e0a77, with EATT) and checks its session: Server Supported Features says EATT;
    /// the unencrypted request is refused "insufficient authentication"; it pairs, gets
    /// two bearers, reads on both, discovers on one; Exchange MTU on an enhanced bearer
    /// gets Request Not Supported.
    static func runBumblesEATTCentral(_ python: String, port: UInt16, against address: String,
                                      sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let out = try await Interop.execute(python, [Interop.root + "/Tests/InteropTests/bumble_eatt_central.py", String(port), address],
                                            timeout: 60, mergeStderr: true).out
        let lines = out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        func event(_ e: String) -> [String: Any]? { lines.first { $0["event"] as? String == e } }
        #expect(event("server-features")?["values"] as? [String] == ["01"], "\(out)", sourceLocation: sourceLocation)
        #expect(event("eatt-unencrypted") == nil, "\(out)", sourceLocation: sourceLocation)
        #expect(event("refused")?["name"] as? String == "ALL_CONNECTIONS_REFUSED_INSUFFICIENT_AUTHENTICATION", "\(out)", sourceLocation: sourceLocation)
        #expect(event("paired")?["encrypted"] as? Bool == true, "\(out)", sourceLocation: sourceLocation)
        #expect(event("eatt")?["count"] as? Int == 2, "\(out)", sourceLocation: sourceLocation)
        #expect(event("read")?["values"] as? [[String]] == [["0e0a77"], ["0e0a77"]], "\(out)", sourceLocation: sourceLocation)
        #expect((event("services")?["uuids"] as? [String])?.contains { $0.uppercased().contains("EA00") } == true, "\(out)", sourceLocation: sourceLocation)
        // Error Response (Request Not Supported, 0x06) to Exchange MTU on an enhanced bearer.
        #expect(event("exchange-mtu")?["error"] as? Int == 0x06, "\(out)", sourceLocation: sourceLocation)
        #expect(event("done") != nil, "\(out)", sourceLocation: sourceLocation)
    }

    /// EATT, our client's side, against Bumble's EATT server (`eatt_enabled`): our
    /// central pairs (an enhanced bearer's channel shall be encrypted, and Bumble's
    /// server does not ask), opens three enhanced bearers, three reads at once reach Bumble on
    /// different bearers and overlap there (Bumble answers each after 0.5 s), and
    /// notifications Bumble sends on every enhanced bearer and an indication on one
    /// reach our subscriptions, the indication confirmed on its bearer.
    @Test func ourEATTClientAgainstBumblesServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (bumble, pipe) = try Interop.launchBumble(python, "bumble_eatt_peripheral.py", port: rc.hciPort, [])
        defer { RootcanalProcess.kill(bumble) }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        let found = try #require(await host.central.first(matching: ScanFilter(addresses: [BumbleGATTClientTests.bumble]), within: .seconds(20)))
        let p = try await host.central.connect(to: found, within: .seconds(10))
        // Bumble's server files the channels it accepts under its own CID and looks up
        // Flow Control Credit Indications by ours, so it never sees credits we give back:
        // enough initial credits for the whole session (see BumbleL2CAPTests).
        #expect(try await p.openEnhancedBearers(count: 3, parameters: CreditBasedParameters(mtu: 517, mps: 247, initialCredits: 1000)) == 3)
        // Bumble's server takes EATT on any link; ours encrypted it first (Part G §5.3.2).
        #expect(await p.security.encrypted)
        let value = try await p.characteristic(BluetoothUUID(0xEA01))
        let reads = (0..<3).map { _ in Task { try await p.read(value) } }
        for r in reads { #expect(try await r.value == [0x0E, 0xA0]) }
        let notified = try await p.subscribe(to: try await p.characteristic(BluetoothUUID(0xEA02)))
        let got = await collect(notified, count: 3, within: .seconds(10))
        #expect(got.sorted { $0[0] < $1[0] } == [[0xE0], [0xE1], [0xE2]])
        let indicated = try await p.subscribe(to: try await p.characteristic(BluetoothUUID(0xEA03)))
        #expect(await firstElement(indicated, within: .seconds(10)) == [0x1D])
        // Bumble disconnects once its indication is confirmed.
        #expect(await p.disconnection(within: .seconds(10)) == .disconnected(reason: .remoteUserTerminatedConnection))
        let events = await BumbleL2CAPTests.lines(pipe)
        func named(_ e: String) -> [[String: Any]] { BumbleSMPTests.named(events, e) }
        // Three reads in Bumble's hands at once: one ATT bearer carries one at a time.
        #expect(named("read").count == 3, "\(events)")
        #expect(named("most-reads-at-once").first?["count"] as? Int == 3, "\(events)")
        #expect(named("notified").first?["bearers"] as? Int == 3, "\(events)")
        #expect(named("indication-confirmed").count == 1, "\(events)")
        await host.close()
    }
}

/// The writers against Bumble: our peripheral streams notifications through a
/// `NotificationWriter` to Bumble's central, and our central streams Write Commands
/// through a `WriteWithoutResponseWriter` to Bumble's peripheral; Bumble reports every
/// value, in the order it took them.
@Suite(.serialized, .liveTimeLimit) struct BumbleWriterTests {
    static let values = (0..<300).map { [UInt8($0 & 0xFF), UInt8($0 >> 8), 0x5A] }

    @Test func ourNotificationWriterToABumbleCentral() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        let c = Characteristic(uuid: BluetoothUUID(0xFFE1), properties: [.notify], value: [0])
        try await host.peripheral.add(Service(uuid: BluetoothUUID(0xFFE0), characteristics: [c]))
        let events = host.peripheral.events()
        var ad = AdvertisingData()
        ad.localName = "writer"
        try await host.peripheral.startAdvertising(ad)
        let bumble = Task {
            try await Interop.execute(python, [Interop.root + "/Tests/InteropTests/bumble_gatt_central.py", String(rc.hciPort), "name:writer",
                                               "--collect", String(Self.values.count)], timeout: 90)
        }
        // Once Bumble subscribed, from a plain task.
        let subscribed = await firstElement(events.filter { e in
            if case let .subscriptionChanged(s, _, notify, _) = e { return s === c && notify }
            return false
        }, within: .seconds(30))
        try #require(subscribed != nil, "Bumble did not subscribe")
        let writer = try await host.peripheral.notificationWriter(for: c, capacity: 16)
        for v in Self.values { try await writer.send(v) }
        try await writer.flush()
        #expect(writer.sent == Self.values.count && writer.dropped == 0)
        let (status, out) = try await bumble.value
        await host.close()
        let lines = out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let got = lines.first { $0["event"] as? String == "values" }?["values"] as? [String]
        #expect(got == Self.values.map(\.hexString), "\(lines.suffix(3))")
        #expect(status == 0 && lines.contains { $0["event"] as? String == "done" }, "\(out.suffix(500))")
    }

    @Test func ourWriteCommandWriterToABumblePeripheral() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (peripheral, out) = try Interop.launchBumble(python, "bumble_gatt_peripheral.py", port: rc.hciPort, ["--write-commands"])
        defer { RootcanalProcess.kill(peripheral) }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        let found = try #require(await host.central.first(matching: ScanFilter(addresses: [BumbleGATTClientTests.bumble]), within: .seconds(20)))
        let p = try await host.central.connect(to: found, within: .seconds(10))
        let target = try await p.characteristic(BluetoothUUID(0xFFF6), in: BluetoothUUID(0xFFF0))
        let writer = try await p.writeWithoutResponseWriter(for: target, capacity: 16)
        for v in Self.values { try await writer.send(v) }
        try await writer.flush()
        #expect(writer.sent == Self.values.count && writer.dropped == 0)
        // A read answered on the same bearer comes after Bumble took every command before it.
        _ = try await p.read(try await p.characteristic(BluetoothUUID(0xFFF1), in: BluetoothUUID(0xFFF0)))
        _ = try await p.disconnect()
        await host.close()
        _ = await Interop.exit(of: peripheral, timeout: 10)
        let lines = String(decoding: await Interop.readAll(out), as: UTF8.self)
            .split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let written = lines.filter { $0["event"] as? String == "write-command" }.compactMap { $0["value"] as? String }
        #expect(written == Self.values.map(\.hexString), "\(written.count) of \(Self.values.count)")
    }
}
