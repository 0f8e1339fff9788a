import BLETesting
import Foundation
import HCI
import L2CAP
import SMP
import Synchronization
import Testing

/// The Security Manager runtime between two of our hosts on the virtual radio:
/// pairing through the controllers' encryption, bonds, re-encryption from stored
/// keys, a key mismatch. Interop with Bumble's SMP is BumbleSMPTests.
@Suite(.timeLimit(.minutes(3)))
struct SecurityTests {
    struct Side {
        var l2cap: L2CAPHost
        var security: SecurityManager
        var handle: UInt16
    }

    /// Connects `b` (central) to `a` (peripheral) and gives each a Security Manager.
    static func link(_ radio: VirtualRadio, a aConfig: PairingConfiguration = PairingConfiguration(), b bConfig: PairingConfiguration = PairingConfiguration(),
                     aStore: any BondStore = InMemoryBondStore(), bStore: any BondStore = InMemoryBondStore(),
                     aDelegate: any PairingDelegate = AutomaticPairingDelegate(), bDelegate: any PairingDelegate = AutomaticPairingDelegate())
        async throws -> (a: Side, b: Side)
    {
        let (la, lb, ah, bh) = try await ChannelTests.link(radio)
        let sa = SecurityManager(l2cap: la, configuration: aConfig, store: aStore, delegate: aDelegate, random: .seeded(1), logger: VirtualRadioTests.logger)
        let sb = SecurityManager(l2cap: lb, configuration: bConfig, store: bStore, delegate: bDelegate, random: .seeded(2), logger: VirtualRadioTests.logger)
        await sa.start(); await sb.start()
        return (Side(l2cap: la, security: sa, handle: ah), Side(l2cap: lb, security: sb, handle: bh))
    }

    static func reconnect(_ a: Side, _ b: Side) async throws -> (UInt16, UInt16) {
        let incoming = await a.l2cap.newConnections(), outgoing = await b.l2cap.newConnections()
        try await a.l2cap.controller.send(LESetAdvertisingEnable(advertisingEnable: true))
        try await b.l2cap.controller.send(LECreateConnection(peerAddressType: .public, peerAddress: VirtualRadioTests.a))
        var ia = incoming.makeAsyncIterator(), ib = outgoing.makeAsyncIterator()
        let pc = try #require(await ia.next()), cc = try #require(await ib.next())
        return (pc.handle, cc.handle)
    }

    static func disconnect(_ b: Side, handle: UInt16) async throws {
        let events = await b.l2cap.linkEvents()
        try await b.l2cap.controller.send(Disconnect(connectionHandle: handle, reason: .remoteUserTerminatedConnection))
        for await e in events { if case .disconnected = e { break } }
    }

    /// Encryption Change [v2] (enabled at initialisation, the virtual controller lists
    /// Set Event Mask Page 2) and [v1] (page 2 cleared again) both complete pairing; the
    /// link's key size is the negotiated one, not the 16 the controller reports in v2.
    @Test(arguments: [true, false]) func encryptionChangeV1AndV2BothCompletePairing(v2: Bool) async throws {
        let radio = VirtualRadio()
        let (a, b) = try await Self.link(radio, a: PairingConfiguration(maximumKeySize: 12))
        #expect(await b.l2cap.controller.info?.encryptionChangeV2 == true)
        if !v2 {
            try await a.l2cap.controller.send(SetEventMaskPage2(eventMaskPage2: 0))
            try await b.l2cap.controller.send(SetEventMaskPage2(eventMaskPage2: 0))
        }
        let events = await b.l2cap.controller.events()
        let state = try await b.security.secure(handle: b.handle)
        #expect(state.encrypted && state.keySize == 12)
        #expect(await a.security.security(handle: a.handle).keySize == 12)
        let seen = await collect(events.compactMap { e -> HCIEventCode? in
            switch e {
            case let .encryptionChangeV2(c): #expect(c.encryptionKeySize == 16); return e.code
            case .encryptionChange: return e.code
            default: return nil
            }
        }, count: 1, within: .seconds(1))
        #expect(seen == [v2 ? .encryptionChangeV2 : .encryptionChange])
    }

    @Test func justWorksBondsThenTheBondReEncryptsWithoutPairing() async throws {
        let radio = VirtualRadio()
        let identity = IdentityKey(irk: Array(1...16), address: VirtualRadioTests.a, addressType: .public)
        let aStore = InMemoryBondStore(), bStore = InMemoryBondStore()
        let (a, b) = try await Self.link(radio, a: PairingConfiguration(identity: identity), aStore: aStore, bStore: bStore)
        let aEvents = await a.security.events()
        let state = try await b.security.secure(handle: b.handle)
        #expect(state.encrypted && state.secureConnections && !state.authenticated && state.keySize == 16)
        #expect(state.level == .encrypted)
        // Both stored the bond; the central knows the peripheral by its identity.
        #expect(bStore.bonds().map(\.address) == [VirtualRadioTests.a])
        #expect(bStore.bonds().first?.keys.peerIdentity == identity)
        #expect(aStore.bonds().map(\.address) == [VirtualRadioTests.b])
        var it = aEvents.makeAsyncIterator()
        var sawPaired = false
        while let e = await it.next() {
            if case .bonded = e { break }
            if case .paired = e { sawPaired = true }
        }
        #expect(sawPaired)
        #expect(await a.security.security(handle: a.handle).encrypted)

        // Reconnect: the central encrypts from the bond; no SMP PDU is exchanged.
        try await Self.disconnect(b, handle: b.handle)
        let smp = await a.l2cap.frames(on: .securityManager)
        let (ah, bh) = try await Self.reconnect(a, b)
        let again = try await b.security.secure(handle: bh)
        #expect(again.encrypted && again.bonded && again.secureConnections)
        #expect(await a.security.security(handle: ah).encrypted)
        _ = smp  // (frames on CID 6 go to the Security Manager's receiver, not this stream)
    }

    /// A bond store that refuses every bond, as a bond file that cannot be written does.
    final class RefusingBondStore: BondStore {
        struct Refused: Error, CustomStringConvertible { var description: String { "the disk is full" } }
        func bonds() -> [Bond] { [] }
        func save(_ bond: Bond) throws { throw Refused() }
        func remove(address: BluetoothAddress, type: AddressType) -> Bool { false }
        func localIdentity() -> IdentityKey? { nil }
        func saveLocalIdentity(_ identity: IdentityKey) throws { throw Refused() }
    }

    /// Both sides bond, but the central's store refuses the bond: its pairing result
    /// says so (`bondNotStored`, with the store's error) and the link is encrypted but
    /// not bonded, in the result, the `paired` event and the link's security; no
    /// `bonded` event comes. The peripheral, whose store took the bond, is bonded.
    @Test func aBondTheStoreRefusesIsReportedNotBonded() async throws {
        let radio = VirtualRadio()
        let aStore = InMemoryBondStore()
        let (a, b) = try await Self.link(radio, aStore: aStore, bStore: RefusingBondStore())
        // Every event, as the Security Manager emits it (on the loop, before the caller resumes).
        let seen = Mutex<[SecurityEvent]>([])
        await b.security.addEventObserver { e in seen.withLock { $0.append(e) } }
        let result = try await b.security.pair(handle: b.handle)
        #expect(result.bonding && result.bondNotStored == "the disk is full")
        #expect(result.security.encrypted && !result.security.bonded)
        let state = await b.security.security(handle: b.handle)
        #expect(state.encrypted && !state.bonded)
        #expect(aStore.bonds().map(\.address) == [VirtualRadioTests.b])
        #expect(await a.security.security(handle: a.handle).bonded)
        let events = seen.withLock { $0 }
        #expect(events.contains(.paired(handle: b.handle, peer: VirtualRadioTests.a, result)), "\(events)")
        #expect(!events.contains { if case .bonded = $0 { true } else { false } }, "\(events)")
    }

    @Test func passkeyEntryAuthenticatesTheLink() async throws {
        let radio = VirtualRadio()
        // a (peripheral) displays a fixed passkey; b (central) types it.
        let (a, b) = try await Self.link(
            radio, a: PairingConfiguration(ioCapability: .displayOnly, mitm: true),
            b: PairingConfiguration(ioCapability: .keyboardOnly, mitm: true),
            aDelegate: DisplayingDelegate(), bDelegate: AutomaticPairingDelegate(passkey: 0))
        let aEvents = await a.security.events()
        // The central cannot know the passkey until the peripheral shows it: read it
        // from the peripheral's prompt and answer with it.
        let shown = Task {
            for await e in aEvents { if case let .prompt(_, .displayPasskey(n)) = e { return n } }
            return UInt32.max
        }
        await b.security.setDelegate(RelayDelegate(shown: shown))
        let state = try await b.security.secure(handle: b.handle, level: .authenticated)
        #expect(state.level == .secureConnections)
        #expect(await a.security.security(handle: a.handle).authenticated)
    }

    @Test func aWrongPasskeyFailsOnBothSidesAndNothingIsStored() async throws {
        let radio = VirtualRadio()
        let aStore = InMemoryBondStore(), bStore = InMemoryBondStore()
        let (a, b) = try await Self.link(
            radio, a: PairingConfiguration(ioCapability: .displayOnly, mitm: true),
            b: PairingConfiguration(ioCapability: .keyboardOnly, mitm: true), aStore: aStore, bStore: bStore,
            bDelegate: AutomaticPairingDelegate(passkey: 1_000_000 - 1))
        let aEvents = await a.security.events()
        await #expect(throws: SecurityError.pairing(.remote(.confirmValueFailed))) {
            try await b.security.secure(handle: b.handle, level: .authenticated)
        }
        for await e in aEvents {
            if case let .pairingFailed(_, _, err) = e {
                #expect(err == .local(.confirmValueFailed))
                break
            }
        }
        #expect(aStore.bonds().isEmpty && bStore.bonds().isEmpty)
        #expect(await !b.security.security(handle: b.handle).encrypted)
        // Straight away again: the peripheral refuses (repeated attempts back-off).
        await #expect(throws: SecurityError.pairing(.remote(.repeatedAttempts))) {
            try await b.security.secure(handle: b.handle, level: .authenticated)
        }
    }

    /// A peer that pairs again keeps one bond. Here the peripheral bonded before with
    /// an identity (0A is one of its link addresses) and distributes none this time:
    /// the new keys go in its identity's place, and the identity key stays, so the
    /// peer's private addresses still find the bond. Before, a second bond came under
    /// the link address beside the first.
    @Test func aPeerPairingAgainWithoutItsIdentityKeepsItsOneBond() async throws {
        let radio = VirtualRadio()
        let identity = IdentityKey(irk: Array(1...16), address: BluetoothAddress("00:00:00:00:00:99")!, addressType: .public)
        let stale = LongTermKey(key: Array(repeating: 7, count: 16), authenticated: false, secureConnections: true)
        var earlier = Bond(address: identity.address, addressType: .public, keys: PairingKeys(peerLTK: stale, peerIdentity: identity),
                           linkAddresses: [Bond.LinkAddress(address: VirtualRadioTests.a, type: .public)])
        earlier.serverDatabaseHash = Array(repeating: 0xAB, count: 16)
        let bStore = InMemoryBondStore([earlier])
        let (a, b) = try await Self.link(radio, bStore: bStore)
        defer { withExtendedLifetime((radio, a)) {} }
        let result = try await b.security.pair(handle: b.handle)
        #expect(result.security.bonded && result.keys.peerIdentity == nil)
        let bonds = bStore.bonds()
        #expect(bonds.count == 1, "\(bonds)")
        #expect(bonds.first?.address == identity.address && bonds.first?.keys.peerIdentity == identity)
        #expect(bonds.first?.keys.peerLTK != nil && bonds.first?.keys.peerLTK != stale)
        #expect(bonds.first?.linkAddresses == [Bond.LinkAddress(address: VirtualRadioTests.a, type: .public)])
        #expect(bonds.first?.serverDatabaseHash == earlier.serverDatabaseHash)
    }

    /// The other way round: the peer bonded under its link address (no identity then)
    /// and distributes an identity now. Its bond moves to the identity, the link address
    /// one of its addresses; the old place is gone.
    @Test func aPeerPairingAgainWithAnIdentityMovesItsBondThere() async throws {
        let radio = VirtualRadio()
        let identity = IdentityKey(irk: Array(1...16), address: BluetoothAddress("00:00:00:00:00:99")!, addressType: .public)
        let earlier = Bond(address: VirtualRadioTests.a, addressType: .public,
                           keys: PairingKeys(peerLTK: LongTermKey(key: Array(repeating: 7, count: 16), authenticated: false, secureConnections: true)))
        let bStore = InMemoryBondStore([earlier])
        let (a, b) = try await Self.link(radio, a: PairingConfiguration(identity: identity), bStore: bStore)
        defer { withExtendedLifetime((radio, a)) {} }
        let seen = Mutex<[SecurityEvent]>([])
        await b.security.addEventObserver { e in seen.withLock { $0.append(e) } }
        let result = try await b.security.pair(handle: b.handle)
        #expect(result.security.bonded && result.keys.peerIdentity == identity)
        let bonds = bStore.bonds()
        #expect(bonds.map(\.address) == [identity.address], "\(bonds)")
        #expect(bonds.first?.linkAddresses == [Bond.LinkAddress(address: VirtualRadioTests.a, type: .public)])
        // The link knows its key is stored (the replaced bond's removal did not clear it).
        #expect(await b.security.hasStoredKey(handle: b.handle))
        let bonded = seen.withLock { $0 }.compactMap { e -> Bond? in if case let .bonded(bond) = e { bond } else { nil } }
        #expect(bonded.map(\.address) == [identity.address])
    }

    /// A bond removed by another program (`btctl bonds remove` beside a daemon) from
    /// the file the Security Manager's store shares: within its next look at the store
    /// it emits `bondsChangedElsewhere` and the link no longer counts a stored key (what
    /// the GATT server's refusals tell apart). Before, the link kept it until the
    /// daemon's own next change to the bonds.
    @Test func aBondRemovedByAnotherProgramIsNoticed() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-elsewhere-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let radio = VirtualRadio()
        let (la, lb, _, bh) = try await ChannelTests.link(radio)
        let sa = SecurityManager(l2cap: la, random: .seeded(1), logger: VirtualRadioTests.logger)
        let sb = SecurityManager(l2cap: lb, store: FileBondStore(path: path), random: .seeded(2), storeCheckInterval: .milliseconds(20),
                                 logger: VirtualRadioTests.logger)
        await sa.start(); await sb.start()
        defer { withExtendedLifetime((radio, sa)) {} }
        _ = try await sb.pair(handle: bh)
        #expect(await sb.hasStoredKey(handle: bh))
        let events = await sb.events()
        #expect(try FileBondStore(path: path).remove(address: VirtualRadioTests.a, type: .public))
        let seen = await collect(events.filter { $0 == .bondsChangedElsewhere }, count: 1, within: .seconds(5))
        #expect(seen == [.bondsChangedElsewhere])
        #expect(await !sb.hasStoredKey(handle: bh))
    }

    @Test func aForgottenBondOnThePeripheralMakesTheCentralPairAgain() async throws {
        let radio = VirtualRadio()
        let aStore = InMemoryBondStore(), bStore = InMemoryBondStore()
        let (a, b) = try await Self.link(radio, aStore: aStore, bStore: bStore)
        _ = try await b.security.secure(handle: b.handle)
        try await Self.disconnect(b, handle: b.handle)
        // The peripheral forgets: its LTK request gets a negative reply, the central
        // hears PIN or Key Missing and pairs afresh.
        #expect(aStore.remove(address: VirtualRadioTests.b, type: .public))
        let (ah, bh) = try await Self.reconnect(a, b)
        let bEvents = await b.security.events()
        let state = try await b.security.secure(handle: bh)
        #expect(state.encrypted)
        var paired = false
        for await e in bEvents { if case .paired = e { paired = true; break } }
        #expect(paired)
        #expect(aStore.bonds().count == 1)
        #expect(await a.security.security(handle: ah).encrypted)
    }

    @Test func differentKeysEndTheLinkWithMICFailure() async throws {
        let radio = VirtualRadio()
        let aStore = InMemoryBondStore(), bStore = InMemoryBondStore()
        let (a, b) = try await Self.link(radio, aStore: aStore, bStore: bStore)
        _ = try await b.security.secure(handle: b.handle)
        try await Self.disconnect(b, handle: b.handle)
        // Corrupt the peripheral's copy of the LTK.
        var bond = try #require(aStore.bonds().first)
        bond.keys.peerLTK?.key[0] ^= 0xFF
        aStore.save(bond)
        let (_, bh) = try await Self.reconnect(a, b)
        let events = await b.l2cap.linkEvents()
        await #expect(throws: SecurityError.notConnected(handle: bh)) { try await b.security.secure(handle: bh) }
        for await e in events {
            if case let .disconnected(_, reason) = e {
                #expect(reason == .connectionTerminatedDueToMICFailure)
                break
            }
        }
    }
}

extension SecurityTests {
    @Test func aSecurityRequestToACentralWithoutSMPEndsWithItsAnswer() async throws {
        let radio = VirtualRadio()
        let (la, lb, ah, _) = try await ChannelTests.link(radio)  // the central (b) has no Security Manager
        let sa = SecurityManager(l2cap: la, random: .seeded(1), logger: VirtualRadioTests.logger)
        await sa.start()
        // Its L2CAP answers SMP with Pairing Failed, Pairing Not Supported.
        await #expect(throws: SecurityError.pairing(.remote(.pairingNotSupported))) { try await sa.secure(handle: ah) }
        #expect(await lb.currentConnections.count == 1)  // (b stays alive to answer)
    }

    @Test func anUnansweredSecurityRequestTimesOut() async throws {
        let radio = VirtualRadio()
        let (la, lb, ah, _) = try await ChannelTests.link(radio)
        let swallowed = await lb.frames(on: .securityManager)  // the central reads SMP and never answers
        let sa = SecurityManager(l2cap: la, random: .seeded(1), timeout: .milliseconds(200), logger: VirtualRadioTests.logger)
        await sa.start()
        await #expect(throws: SecurityError.pairing(.timeout)) { try await sa.secure(handle: ah) }
        var it = swallowed.makeAsyncIterator()
        #expect(await it.next()?.payload.first == SMPCode.securityRequest.rawValue)
    }
}

struct DisplayingDelegate: PairingDelegate {
    func answer(_ prompt: PairingPrompt, peer: BluetoothAddress) async -> PairingAnswer { .confirmed(true) }
}

/// Types the passkey the other side's prompt showed.
struct RelayDelegate: PairingDelegate {
    let shown: Task<UInt32, Never>
    func answer(_ prompt: PairingPrompt, peer: BluetoothAddress) async -> PairingAnswer {
        guard case .enterPasskey = prompt else { return .confirmed(true) }
        return .passkey(await shown.value)
    }
}
