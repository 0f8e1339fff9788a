// Security through the facade, two of our hosts on the virtual radio: a protected
// characteristic makes the central pair on demand and retry; the peripheral asks
// with a Security Request when the central does not; bonds re-encrypt the next link
// and can be listed and removed; security changes reach the connection events.

import BLE
import Snoop
import Synchronization
import BLETesting
import Testing

@Suite(.timeLimit(.minutes(3))) struct FacadeSecurityTests {
    static func room(central: SecurityOptions, peripheral: SecurityOptions) async throws -> (BluetoothHost, BluetoothHost, VirtualRadio) {
        let radio = VirtualRadio()
        let c = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:00:01")!), logger: Bench.logger, security: central)
        let p = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:01:00")!), logger: Bench.logger, security: peripheral)
        try await c.start()
        try await p.start()
        return (c, p, radio)
    }

    @Test func anEncryptedCharacteristicIsReadAfterPairingOnDemand() async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(1)), peripheral: SecurityOptions(random: .seeded(2)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let secret = Characteristic(uuid: uuidB, properties: [.read], permissions: [.readEncrypted], value: [7, 7])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [secret]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let events = c.connectionEvents()
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        #expect(await !remote.security.encrypted)
        let rc = try await remote.characteristic(uuidB)
        // Insufficient Encryption → the central pairs (Just Works) and reads again.
        #expect(try await remote.read(rc) == [7, 7])
        let state = await remote.security
        #expect(state.encrypted && state.bonded && state.level == .encrypted)
        let seen = await collect(events.filter { if case .securityChanged = $0 { return true }; return false }, count: 1, within: .seconds(2))
        guard case let .securityChanged(conn, s)? = seen.first else { Issue.record("no security event"); return }
        #expect(conn.handle == remote.connection.handle && s.encrypted)
        #expect(try await c.bonds().map(\.address) == [BluetoothAddress("C0:00:00:00:01:00")!])
        #expect(try await p.bonds().map(\.address) == [BluetoothAddress("C0:00:00:00:00:01")!])

        // Next link: the bond's key, no pairing; after removing the bond, refused again.
        _ = try await remote.disconnect()
        try await p.peripheral.startAdvertising(AdvertisingData())
        let again = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        let securityEvents = await c.securityEvents()
        #expect(try await again.secure().bonded)
        #expect(try await again.read(try await again.characteristic(uuidB)) == [7, 7])
        let pairings = await collect(securityEvents.filter { if case .paired = $0 { return true }; return false }, count: 1, within: .milliseconds(200))
        #expect(pairings.isEmpty)
        #expect(try await c.removeBond(BluetoothAddress("C0:00:00:00:01:00")!, type: .public))
        #expect(try await c.bonds().isEmpty)
    }

    /// A bonded client's CCCD values persist across connections (Vol 3, Part G,
    /// §3.3.3.3): our server keeps them with the bond and puts them back once the next
    /// link is encrypted with the bond's key, not before.
    @Test func aBondedCentralsSubscriptionComesBackWhenItsLinkIsEncryptedAgain() async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(7)), peripheral: SecurityOptions(random: .seeded(8)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let level = Characteristic(uuid: uuidB, properties: [.read, .notify], value: [50])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [level]))
        let cccd = try #require(try await p.peripheral.handles(of: level).clientConfiguration)
        try await p.peripheral.startAdvertising(AdvertisingData())
        let peripheralEvents = p.peripheral.events()
        func subscriptionChanges(_ n: Int) async -> [Bool] {
            await collect(peripheralEvents.compactMap { e -> Bool? in
                if case let .subscriptionChanged(_, _, notify, _) = e { return notify }
                return nil
            }, count: n, within: .seconds(3))
        }
        let address = BluetoothAddress("C0:00:00:00:01:00")!
        let remote = try await c.central.connect(to: address, within: .seconds(5))
        #expect(try await remote.secure().bonded)
        let values = try await remote.subscribe(to: try await remote.characteristic(uuidB))
        #expect(await subscriptionChanges(1) == [true])
        #expect(try await p.bonds().first?.clientConfigurations == [cccd: 1])
        // The link ends with the subscription still on (no CCCD write-off): the
        // application hears that it ended with the link, and the bond keeps it.
        _ = try await remote.disconnect()
        _ = values
        #expect(await subscriptionChanges(1) == [false])
        #expect(try await p.peripheral.subscribers(of: level).isEmpty)
        #expect(try await p.bonds().first?.clientConfigurations == [cccd: 1])

        try await p.peripheral.startAdvertising(AdvertisingData())
        let again = try await c.central.connect(to: address, within: .seconds(5))
        // Unencrypted, the peer has not proved it is the bonded central: nothing restored.
        #expect(try await p.peripheral.subscribers(of: level).isEmpty)
        #expect(try await again.secure().bonded)
        #expect(await subscriptionChanges(1) == [true])
        let subscribers = try await p.peripheral.subscribers(of: level)
        #expect(subscribers.count == 1 && subscribers.first?.notify == true && subscribers.first?.central.handle != nil)
        let rc = try await again.characteristic(uuidB)
        #expect(try await again.read(try #require(rc.clientConfiguration)) == [1, 0])
        // A notification reaches it without a new subscription.
        #expect(try await p.peripheral.notify(level, value: [49]).count == 1)
    }

    /// `ConnectionEvent.securityChanged` says the bonded client is back: a
    /// notification sent as soon as the application hears it reaches the client's
    /// restored subscription (the event now goes out after the restoration).
    @Test(arguments: 0..<5)
    func aNotificationSentOnTheSecurityEventReachesTheRestoredSubscription(seed: UInt64) async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(20 + seed)), peripheral: SecurityOptions(random: .seeded(40 + seed)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let level = Characteristic(uuid: uuidB, properties: [.read, .notify], value: [50])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [level]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let address = BluetoothAddress("C0:00:00:00:01:00")!
        let remote = try await c.central.connect(to: address, within: .seconds(5))
        #expect(try await remote.secure().bonded)
        let subscribed = p.peripheral.events()
        // Kept (letting go of it would write the CCCD off).
        let values = try await remote.subscribe(to: try await remote.characteristic(uuidB))
        _ = await collect(subscribed.filter { if case .subscriptionChanged = $0 { return true }; return false }, count: 1, within: .seconds(3))
        // Stored with the bond as the server took the write.
        #expect(try await p.bonds().first?.clientConfigurations.isEmpty == false)
        _ = try await remote.disconnect()
        try await p.peripheral.startAdvertising(AdvertisingData())
        // The peripheral's application notifies the moment the link is secured again.
        let events = p.connectionEvents()
        let notified = Task { () -> Int in
            for await e in events {
                if case let .securityChanged(_, s) = e, s.bonded { return (try? await p.peripheral.notify(level, value: [49]).count) ?? -1 }
            }
            return -2
        }
        let again = try await c.central.connect(to: address, within: .seconds(5))
        #expect(try await again.secure().bonded)
        #expect(await notified.value == 1)
        withExtendedLifetime(values) {}
    }

    /// A bonded central that subscribes and leaves at once finds its subscription at
    /// its next link: the bond has the CCCD as the server took the write (before, the
    /// host stored it when its event follower came to the write, which could be after
    /// the link's end, and then stored nothing).
    @Test(arguments: 0..<5)
    func aSubscriptionMadeJustBeforeTheLinkEndsIsKeptWithTheBond(seed: UInt64) async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(60 + seed)), peripheral: SecurityOptions(random: .seeded(80 + seed)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let level = Characteristic(uuid: uuidB, properties: [.read, .notify], value: [50])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [level]))
        let cccd = try #require(try await p.peripheral.handles(of: level).clientConfiguration)
        try await p.peripheral.startAdvertising(AdvertisingData())
        let address = BluetoothAddress("C0:00:00:00:01:00")!
        let remote = try await c.central.connect(to: address, within: .seconds(5))
        #expect(try await remote.secure().bonded)
        let values = try await remote.subscribe(to: try await remote.characteristic(uuidB))
        _ = try await remote.disconnect()
        // No wait: the server stored it before it answered the CCCD write.
        #expect(try await p.bonds().first?.clientConfigurations == [cccd: 1])
        withExtendedLifetime(values) {}
    }

    /// A subscription made before the pairing is the new bond's from the start: the
    /// Security Manager stores the bond with it (it used to be added after, when the
    /// host's follower of the security events came to the pairing), so a link that
    /// ends right after the pairing leaves it in the bond.
    @Test(arguments: 0..<5)
    func aSubscriptionMadeBeforeThePairingIsKeptWithTheNewBond(seed: UInt64) async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(100 + seed)), peripheral: SecurityOptions(random: .seeded(120 + seed)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let level = Characteristic(uuid: uuidB, properties: [.read, .notify], value: [50])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [level]))
        let cccd = try #require(try await p.peripheral.handles(of: level).clientConfiguration)
        try await p.peripheral.startAdvertising(AdvertisingData())
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        let values = try await remote.subscribe(to: try await remote.characteristic(uuidB))
        #expect(try await remote.secure().bonded)
        // Once the peripheral has handled the link's end (after the pairing's last PDU).
        let ends = p.connectionEvents()
        _ = try await remote.disconnect()
        _ = await collect(ends.filter { if case .disconnected = $0 { return true }; return false }, count: 1, within: .seconds(5))
        #expect(try await p.bonds().first?.clientConfigurations == [cccd: 1])
        withExtendedLifetime(values) {}
    }

    @Test func thePeripheralAsksForSecurityWhenTheCentralDoesNotPairOnDemand() async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(3), pairOnDemand: false),
                                                peripheral: SecurityOptions(random: .seeded(4)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let secret = Characteristic(uuid: uuidB, properties: [.read], permissions: [.readEncrypted], value: [9])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [secret]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let peripheralEvents = p.connectionEvents()
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        let rc = try await remote.characteristic(uuidB)
        // No bond yet: Insufficient Authentication (the central must pair; Vol 3, Part C, §10.3.1).
        await #expect(throws: BLEError.att(.insufficientAuthentication, handle: rc.valueHandle)) { _ = try await remote.read(rc) }
        // The refusal made the peripheral send a Security Request; the central paired.
        let seen = await collect(peripheralEvents.filter { if case .securityChanged = $0 { return true }; return false }, count: 1, within: .seconds(5))
        #expect(seen.count == 1)
        #expect(await remote.security.encrypted)
        #expect(try await remote.read(rc) == [9])

        // Bonded now: on the next link, unencrypted, the central has a key to encrypt
        // with, so the refusal is Insufficient Encryption, and the Security Request it
        // brings is answered from the bond, with no second pairing.
        let pairings = await p.securityEvents()
        try await remote.disconnect()
        _ = await collect(peripheralEvents.filter { if case .disconnected = $0 { return true }; return false }, count: 1, within: .seconds(5))
        let again = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        #expect(!(await again.security.encrypted))
        await #expect(throws: BLEError.att(.insufficientEncryption, handle: rc.valueHandle)) { _ = try await again.read(rc) }
        let reencrypted = await collect(peripheralEvents.filter { if case .securityChanged = $0 { return true }; return false }, count: 1, within: .seconds(5))
        #expect(reencrypted.count == 1)
        #expect(await again.security.bonded)
        #expect(try await again.read(rc) == [9])
        let paired = await collect(pairings.filter { if case .paired = $0 { return true }; return false }, count: 1, within: .milliseconds(200))
        #expect(paired.isEmpty)
    }

    @Test func anAuthenticatedCharacteristicCannotBeReachedWithJustWorks() async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(5)), peripheral: SecurityOptions(random: .seeded(6)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let secret = Characteristic(uuid: uuidB, properties: [.read], permissions: [.readAuthenticated], value: [1])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [secret]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        let rc = try await remote.characteristic(uuidB)
        // Insufficient Authentication on an unencrypted link: first the central pairs for
        // encryption (Just Works), reads again, is refused again and pairs for an
        // authenticated key, as BlueZ does. Both sides NoInputNoOutput: MITM is
        // impossible; the central, which asked for it, ends that pairing with
        // Authentication Requirements once it sees the response.
        await #expect(throws: SecurityError.pairing(.local(.authenticationRequirements))) { _ = try await remote.read(rc) }
        let s = await remote.security
        #expect(s.encrypted && !s.authenticated)
    }

    /// An SPSM published with a security requirement refuses an unencrypted link with
    /// "insufficient authentication" (§4.23); a central that pairs on demand pairs and
    /// asks again, in either mode; one that does not gets the refusal.
    @Test func aProtectedSPSMIsOpenedAfterPairingOnDemand() async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(11)), peripheral: SecurityOptions(random: .seeded(12)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let incoming = await p.publishChannel(spsm: 0x0085, security: ChannelSecurity(level: .encrypted, minimumKeySize: 16))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        let channels = try await remote.openChannels(spsm: 0x0085, count: 2)
        let secured = await remote.security
        #expect(channels.count == 2 && secured.encrypted)
        var it = incoming.makeAsyncIterator()
        let first = try #require(await it.next())
        try await channels[0].send([1, 2, 3])
        var sdus = first.sdus.makeAsyncIterator()
        #expect(try await sdus.next() == [1, 2, 3])
        // An SPSM that asks for authentication: the central tries to pair with MITM
        // protection, which two hosts without input or output cannot do; that failure
        // is the answer.
        let protected = await p.publishChannel(spsm: 0x0086, security: ChannelSecurity(level: .authenticated))
        await #expect(throws: SecurityError.self) { _ = try await remote.openChannel(spsm: 0x0086) }
        withExtendedLifetime(protected) {}
    }

    @Test func withoutPairingOnDemandTheRefusalIsTheAnswer() async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(13), pairOnDemand: false), peripheral: SecurityOptions(random: .seeded(14)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let published = await p.publishChannel(spsm: 0x0085, security: ChannelSecurity(level: .encrypted))
        defer { withExtendedLifetime(published) {} }
        try await p.peripheral.startAdvertising(AdvertisingData())
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        await #expect(throws: L2CAPChannelError.refused(.insufficientAuthentication)) { _ = try await remote.openChannel(spsm: 0x0085) }
        #expect(await !remote.security.encrypted)
        // Once encrypted, the same request is accepted.
        try await remote.secure()
        _ = try await remote.openChannel(spsm: 0x0085)

        // Bonded now: on the next, unencrypted link the central has a key to encrypt
        // with, so the refusal is Insufficient Encryption (Vol 3, Part C, §10.3.1), and
        // encrypting from the bond, with no pairing, opens the channel.
        let peripheralEvents = p.connectionEvents()
        let pairings = await p.securityEvents()
        try await remote.disconnect()
        _ = await collect(peripheralEvents.filter { if case .disconnected = $0 { return true }; return false }, count: 1, within: .seconds(5))
        let again = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        #expect(await !again.security.encrypted)
        await #expect(throws: L2CAPChannelError.refused(.insufficientEncryption)) { _ = try await again.openChannel(spsm: 0x0085) }
        #expect(try await again.secure().bonded)
        _ = try await again.openChannel(spsm: 0x0085)
        let paired = await collect(pairings.filter { if case .paired = $0 { return true }; return false }, count: 1, within: .milliseconds(200))
        #expect(paired.isEmpty)
    }
}

extension FacadeSecurityTests {
    /// The applications exchange LE Secure Connections OOB data (as over NFC) through
    /// the facade; two devices without any IO then pair authenticated, no prompt.
    @Test func outOfBandDataTheApplicationsExchangedGivesAnAuthenticatedKey() async throws {
        let (c, p, radio) = try await Self.room(central: SecurityOptions(random: .seeded(41)), peripheral: SecurityOptions(random: .seeded(42)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let centralOOB = try await c.makeLocalOOBData(), peripheralOOB = try await p.makeLocalOOBData()
        #expect(centralOOB.shared.address == BluetoothAddress("C0:00:00:00:00:01")!)
        await c.setOutOfBand(OOBConfiguration(local: centralOOB, peer: peripheralOOB.shared))
        await p.setOutOfBand(OOBConfiguration(local: peripheralOOB, peer: centralOOB.shared))
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [Characteristic(uuid: uuidB, properties: [.read], permissions: [.readAuthenticated], value: [9])]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let events = await c.securityEvents()
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        // Insufficient Authentication → pairing on demand, by OOB.
        #expect(try await remote.read(try await remote.characteristic(uuidB)) == [9])
        let seen = await collect(events.filter {
            switch $0 {
            case .paired, .prompt: return true
            default: return false
            }
        }, count: 1, within: .seconds(2))
        guard case let .paired(_, _, result)? = seen.first else { Issue.record("\(seen)"); return }
        #expect(result.method == .outOfBand && result.security.authenticated && result.security.secureConnections)
    }
}

/// Data signing (Vol 3, Part C, §10.4): two hosts bond, each distributing its CSRK; on
/// the next link, not encrypted, each writes the other's characteristic with Signed
/// Write Commands, the counters kept with the bonds on both sides.
@Suite(.timeLimit(.minutes(3))) struct SignedWriteFacadeTests {
    @Test func bondedHostsSignWritesBothWaysOnAnUnencryptedLink() async throws {
        var pairing = PairingConfiguration()
        pairing.keys = [.encryptionKey, .identityKey, .signingKey]
        let (c, p, radio) = try await FacadeSecurityTests.room(central: SecurityOptions(pairing: pairing, random: .seeded(51)),
                                                               peripheral: SecurityOptions(pairing: pairing, random: .seeded(52)))
        defer { Task { await c.close(); await p.close(); _ = radio } }
        let centralAddress = BluetoothAddress("C0:00:00:00:00:01")!, peripheralAddress = BluetoothAddress("C0:00:00:00:01:00")!
        let control = Characteristic(uuid: uuidB, properties: [.authenticatedSignedWrites], value: [0])
        // Written after a write that must make no event: the next event is this one's.
        let fence = Characteristic(uuid: BluetoothUUID(0xFE00), properties: [.write], value: [0])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [control, fence]))
        let back = Characteristic(uuid: uuidC, properties: [.authenticatedSignedWrites], value: [0])
        try await c.peripheral.add(Service(uuid: uuidA, characteristics: [back]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let first = try await c.central.connect(to: peripheralAddress, within: .seconds(5))
        // Unbonded: nothing to sign with.
        await #expect(throws: SecurityError.noSigningKey) { try await first.writeSigned([1], to: try await first.characteristic(uuidB)) }
        #expect(try await first.secure().bonded)
        _ = try await first.disconnect()
        #expect(try await c.bonds().first?.keys.localCSRK != nil)
        let centralCSRK = try await c.bonds().first?.keys.localCSRK
        #expect(try await p.bonds().first?.keys.peerCSRK == centralCSRK)

        try await p.peripheral.startAdvertising(AdvertisingData())
        let peripheralEvents = p.peripheral.events(), centralEvents = c.peripheral.events()
        func written(_ events: BufferedStream<PeripheralEvent>, _ n: Int, within limit: Duration = .seconds(3)) async -> [[UInt8]] {
            await collect(events.compactMap { e -> [UInt8]? in
                if case let .written(_, v, _) = e { return v }
                return nil
            }, count: n, within: limit)
        }
        let remote = try await c.central.connect(to: peripheralAddress, within: .seconds(5))
        #expect(await !remote.security.encrypted)
        let rc = try await remote.characteristic(uuidB)
        try await remote.writeSigned([0x13, 0x37], to: rc)
        try await remote.writeSigned([0x14], to: rc)
        #expect(await written(peripheralEvents, 2) == [[0x13, 0x37], [0x14]])
        #expect(try await c.bonds().first?.signCounter == 1)
        #expect(try await p.bonds().first?.peerSignCounter == 1)
        // The other way: the peripheral signs a write to the central's server.
        let central = try #require(await p.connections.first)
        let peer = try #require(await p.gattPeer(on: central))
        try await peer.writeSigned([0x42], to: try await peer.characteristic(uuidC))
        #expect(await written(centralEvents, 1) == [[0x42]])
        #expect(try await p.bonds().first?.signCounter == 0)
        #expect(try await c.bonds().first?.peerSignCounter == 0)
        #expect(try await p.bonds().map(\.address) == [centralAddress])
        // Encrypted now: §4.9.2 sends a plain Write Command, which a signed-writes-only
        // characteristic does not take; no counter is spent.
        #expect(try await remote.secure().encrypted)
        try await remote.writeSigned([0x15], to: rc)
        // The server takes a link's PDUs in order and reports each as it takes it: the
        // fence's write is the next event only if the Write Command made none.
        try await remote.write([0xFE], to: try await remote.characteristic(fence.uuid))
        #expect(await written(peripheralEvents, 1) == [[0xFE]])
        #expect(try await c.bonds().first?.signCounter == 1)
    }
}

/// Robust caching (Vol 3, Part G, §2.5.2.1): the central keeps a bonded peripheral's
/// GATT layout with the bond and, at the next connection, reads the peer's Database
/// Hash instead of discovering while the hash holds.
@Suite(.timeLimit(.minutes(3))) struct GATTCacheTests {
    @Test func aBondedPeripheralsLayoutIsReusedWhileItsDatabaseHashHolds() async throws {
        let radio = VirtualRadio()
        let centralAddress = BluetoothAddress("C0:00:00:00:00:01")!, peripheralAddress = BluetoothAddress("C0:00:00:00:01:00")!
        // The ATT opcodes the central sends.
        let sent = Mutex<[UInt8]>([])
        let transport = RecordingTransport(wrapping: await radio.makeController(address: centralAddress)) { r in
            if r.direction == .hostToController, case let .packet(.acl(a)) = r.content, a.data.count > 4, a.data[2] == 4, a.data[3] == 0 {
                sent.withLock { $0.append(a.data[4]) }
            }
        }
        let c = BluetoothHost(transport: transport, logger: Bench.logger, security: SecurityOptions(random: .seeded(11)))
        let p = BluetoothHost(transport: await radio.makeController(address: peripheralAddress), logger: Bench.logger, security: SecurityOptions(random: .seeded(12)))
        try await c.start()
        try await p.start()
        defer { Task { await c.close(); await p.close(); _ = radio } }
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [Characteristic(uuid: uuidB, properties: [.read], value: [1])]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let readByGroupType: UInt8 = 0x10, readByType: UInt8 = 0x08

        // First link: discovery, then pairing with bonding; the layout joins the bond.
        let remote = try await c.central.connect(to: peripheralAddress, within: .seconds(5))
        let first = try await remote.discoverServices()
        #expect(sent.withLock { $0.contains(readByGroupType) })
        #expect(try await remote.secure().bonded)
        #expect(try await remote.read(try await remote.characteristic(uuidB)) == [1])
        let cache = try #require(try await c.bonds().first?.database)
        #expect(cache.services.count == first.count && cache.hash.count == 16)
        _ = try await remote.disconnect()

        // Second link, not even encrypted: one Read By Type of the hash, no discovery.
        try await p.peripheral.startAdvertising(AdvertisingData())
        let again = try await c.central.connect(to: peripheralAddress, within: .seconds(5))
        sent.withLock { $0.removeAll() }
        #expect(try await again.discoverServices() == first)
        #expect(sent.withLock { $0 } == [readByType], "\(sent.withLock { $0 })")
        #expect(try await again.read(try await again.characteristic(uuidB)) == [1])
        _ = try await again.disconnect()

        // The peripheral's database changes while no link is up: the hash differs, so
        // the central discovers again, and the bond gets the new layout once encrypted.
        try await p.peripheral.add(Service(uuid: uuidC, characteristics: [Characteristic(uuid: uuidB, properties: [.read], value: [2])]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let third = try await c.central.connect(to: peripheralAddress, within: .seconds(5))
        sent.withLock { $0.removeAll() }
        let changed = try await third.discoverServices()
        #expect(sent.withLock { $0.contains(readByGroupType) })
        #expect(changed.contains { $0.uuid == uuidC } && changed.count == first.count + 1)
        #expect(try await third.secure().bonded)
        #expect(try await third.read(try await third.characteristic(uuidB, in: uuidC)) == [2])
        #expect(try await c.bonds().first?.database?.services.count == changed.count)
        #expect(try await c.bonds().first?.database?.hash != cache.hash)
        _ = try await third.disconnect()
    }
}

/// What the facade owes the peer (the Database Hash read that stores a new bond's
/// layout, the CCCD write of a subscription the program let go of) is queued in its
/// place before the program's next operation but not waited for. With a read
/// outstanding that the peer's application never answers, a disconnect goes out at
/// once and the read ends with the link; it used to wait behind the read (and the
/// owed request queued after it) for the peer's 20 s manual-answer timeout, which the
/// link-churn test showed as 20 s disconnects.
@Suite(.timeLimit(.minutes(3))) struct OwedTrafficTests {
    enum Owed: String, CaseIterable, Sendable { case layoutAfterPairing, unsubscribeLetGo }

    @Test(arguments: Owed.allCases)
    func owedTrafficDoesNotHoldTheNextOperation(owed: Owed) async throws {
        let radio = VirtualRadio()
        let address = BluetoothAddress("C0:00:00:00:0F:01")!
        let central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0F:02")!), logger: Bench.logger,
                                    security: SecurityOptions(random: .seeded(1)))
        let peripheral = BluetoothHost(transport: await radio.makeController(address: address), logger: Bench.logger,
                                       security: SecurityOptions(random: .seeded(2)))
        try await central.start()
        try await peripheral.start()
        defer { Task { await central.close(); await peripheral.close(); _ = radio } }
        let silent = Characteristic(uuid: uuidA, properties: [.read], value: [], answersManually: true)
        let noisy = Characteristic(uuid: uuidB, properties: [.read, .notify], value: [1])
        try await peripheral.peripheral.add(Service(uuid: BluetoothUUID(0xFFE0), characteristics: [silent, noisy]))
        // The peer's application takes each request and never answers; `asked` says it came.
        let requests = await peripheral.peripheral.requests()
        let (asked, ask) = AsyncStream<Void>.makeStream()
        let taker = Task { var held: [ReadWriteRequest] = []; for await r in requests { held.append(r); ask.yield() } }
        defer { taker.cancel() }
        try await peripheral.peripheral.startAdvertising(AdvertisingData())
        let remote = try await central.central.connect(to: address, within: .seconds(5))
        let rs = try await remote.characteristic(uuidA), rn = try await remote.characteristic(uuidB)
        switch owed {
        case .layoutAfterPairing:
            let read = Task { try await remote.read(rs) }
            #expect(await firstElement(asked, within: .seconds(5)) != nil)
            #expect(try await remote.secure().bonded)
            _ = try await remote.disconnect()
            await #expect(throws: BLEError.disconnected(reason: .connectionTerminatedByLocalHost)) { _ = try await read.value }
        case .unsubscribeLetGo:
            let values = try await remote.subscribe(to: rn)
            let (started, start) = AsyncStream<Void>.makeStream()
            let consumer = Task { start.yield(); for try await _ in values {} }
            _ = await firstElement(started, within: .seconds(5))
            let read = Task { try await remote.read(rs) }
            // The read is outstanding at the peer before the subscription is let go of.
            #expect(await firstElement(asked, within: .seconds(5)) != nil)
            consumer.cancel()
            _ = try await remote.disconnect()
            await #expect(throws: BLEError.disconnected(reason: .connectionTerminatedByLocalHost)) { _ = try await read.value }
        }
    }
}

extension FacadeSecurityTests {
    /// Holds each confirmation until the test is over: a prompt nobody answers.
    struct UnansweredDelegate: PairingDelegate {
        let asked: AsyncStream<Void>.Continuation
        func answer(_ prompt: PairingPrompt, peer: BluetoothAddress) async -> PairingAnswer {
            if case .displayPasskey = prompt { return .confirmed(true) }
            asked.yield()
            try? await Task.sleep(for: .seconds(20))
            return .confirmed(false)
        }
    }

    /// The host closes with a pairing waiting on its user: the pairing ends with an
    /// error at once (not at the SMP timeout, with the loop gone), and the security
    /// events stream finishes like every other stream the host hands out, so a
    /// consumer's `for await` does not outlive the host. (Before, the Security Manager
    /// heard nothing of the transport's end: its streams never finished.)
    @Test func closingTheHostEndsAWaitingPairingAndFinishesTheSecurityEvents() async throws {
        let (asked, askedContinuation) = AsyncStream.makeStream(of: Void.self)
        let io = PairingConfiguration(ioCapability: .displayYesNo, mitm: true)
        let (c, p, radio) = try await Self.room(central: SecurityOptions(pairing: io, delegate: UnansweredDelegate(asked: askedContinuation), random: .seeded(51)),
                                                peripheral: SecurityOptions(pairing: io, random: .seeded(52)))
        defer { Task { await p.close(); _ = radio } }
        try await p.peripheral.startAdvertising(AdvertisingData())
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        let events = await c.securityEvents(), links = c.connectionEvents()
        let pairing = Task { try await remote.secure() }
        #expect(await firstElement(asked, within: .seconds(5)) != nil)
        await c.close()
        let ended = await firstElement(AsyncStream<Bool> { k in
            Task { k.yield((try? await pairing.value) == nil) }
        }, within: .seconds(3))
        #expect(ended == true, "the pairing did not end with an error when the host closed")
        for (name, stream) in [("security", AsyncStream<Void> { k in Task { for await _ in events {}; k.yield() } }),
                               ("connection", AsyncStream<Void> { k in Task { for await _ in links {}; k.yield() } })] {
            #expect(await firstElement(stream, within: .seconds(3)) != nil, "the \(name) events did not finish when the host closed")
        }
        // A stream asked for after the close is finished already.
        let late = await c.securityEvents()
        #expect(await firstElement(AsyncStream<Void> { k in Task { for await _ in late {}; k.yield() } }, within: .seconds(3)) != nil)
    }
}
