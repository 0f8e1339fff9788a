import BLETesting
import HCI
import SMP
import Synchronization
import Testing

/// `BondLimit`: a Security Manager keeps at most `maximum` bonds. A new peer's bond
/// beyond them is refused (the pairing still encrypts, its result says why the bond was
/// not kept) or, with `.replaceOldest`, the bonds saved longest ago whose peers are not
/// connected make room for it.
@Suite(.timeLimit(.minutes(3)))
struct BondLimitTests {
    static func stranger(_ n: UInt8) -> Bond {
        Bond(address: BluetoothAddress("00:00:00:00:10:\(String(format: "%02X", n))")!, addressType: .public,
             keys: PairingKeys(peerLTK: LongTermKey(key: Array(repeating: n, count: 16), authenticated: false, secureConnections: true)))
    }

    /// The central, whose store holds `stored` and whose limit is `limit`, pairs with a
    /// peripheral that distributes no identity (its bond is under its link address).
    /// `peerStore` is the peripheral's.
    static func pair(limit: BondLimit, stored: [Bond], peerStore: InMemoryBondStore = InMemoryBondStore(), centralLimited: Bool = true)
        async throws -> (result: PairingResult, store: InMemoryBondStore, events: [SecurityEvent], handle: UInt16)
    {
        let radio = VirtualRadio()
        let store = InMemoryBondStore(stored)
        let (a, b) = centralLimited
            ? try await SecurityTests.link(radio, b: PairingConfiguration(bondLimit: limit), aStore: peerStore, bStore: store)
            : try await SecurityTests.link(radio, a: PairingConfiguration(bondLimit: limit), aStore: store, bStore: peerStore)
        defer { withExtendedLifetime((radio, a)) {} }
        let limited = centralLimited ? b : a
        let seen = Mutex<[SecurityEvent]>([])
        await limited.security.addEventObserver { e in seen.withLock { $0.append(e) } }
        let result = try await b.security.pair(handle: b.handle)
        // The limited side's result (the peripheral's comes with its `paired` event).
        let events = seen.withLock { $0 }
        let own = centralLimited ? result : events.compactMap { e -> PairingResult? in if case let .paired(_, _, r) = e { r } else { nil } }.first ?? result
        return (own, store, events, limited.handle)
    }

    /// The full side asks for no bonding in its Pairing Request (as central) or Response
    /// (as peripheral), so the peer, which would bond, keeps no bond either.
    @Test(arguments: [true, false]) func aNewPeersBondBeyondTheLimitIsRefusedAndTheStoredOnesStay(centralLimited: Bool) async throws {
        let old = (1...3).map(Self.stranger)
        let peerStore = InMemoryBondStore()
        let (result, store, events, handle) = try await Self.pair(limit: BondLimit(maximum: 3), stored: old, peerStore: peerStore, centralLimited: centralLimited)
        #expect(!result.bonding && result.security.encrypted && !result.security.bonded)
        #expect(result.bondNotStored == "the bond store holds its limit of 3 bonds (PairingConfiguration.bondLimit)")
        #expect(store.bonds() == old)
        #expect(peerStore.bonds().isEmpty)
        let peer = centralLimited ? VirtualRadioTests.a : VirtualRadioTests.b
        #expect(events.contains(.paired(handle: handle, peer: peer, result)), "\(events)")
        #expect(!events.contains { if case .bonded = $0 { true } else if case .bondEvicted = $0 { true } else { false } }, "\(events)")
    }

    /// A peer already bonded may pair again at the limit: its bond is replaced.
    @Test func aBondedPeerPairsAgainAtTheLimit() async throws {
        let old = (1...2).map(Self.stranger) + [Bond(address: VirtualRadioTests.a, addressType: .public, keys: PairingKeys())]
        let (result, store, _, _) = try await Self.pair(limit: BondLimit(maximum: 3), stored: old)
        #expect(result.bonding && result.security.bonded && result.bondNotStored == nil)
        #expect(store.bonds().map(\.address) == [old[0].address, old[1].address, VirtualRadioTests.a])
        #expect(store.bonds().last?.keys.peerLTK != nil)
    }

    @Test func replaceOldestRemovesTheBondSavedLongestAgoFirst() async throws {
        let old = (1...3).map(Self.stranger)
        let (result, store, events, _) = try await Self.pair(limit: BondLimit(maximum: 3, whenFull: .replaceOldest), stored: old)
        #expect(result.security.bonded && result.bondNotStored == nil)
        #expect(store.bonds().map(\.address) == [old[1].address, old[2].address, VirtualRadioTests.a])
        let kinds = events.compactMap { e -> String? in
            switch e {
            case let .bondEvicted(b): return "evicted \(b.address)"
            case let .bonded(b): return "bonded \(b.address)"
            default: return nil
            }
        }
        #expect(kinds == ["evicted \(old[0].address)", "bonded \(VirtualRadioTests.a)"])
        #expect(result.bondsEvicted == [old[0]])
    }

    /// A store already above the limit (the limit was lowered) comes down to it.
    @Test func aStoreAboveALoweredLimitComesDownToIt() async throws {
        let old = (1...4).map(Self.stranger)
        let (result, store, _, _) = try await Self.pair(limit: BondLimit(maximum: 2, whenFull: .replaceOldest), stored: old)
        #expect(result.security.bonded)
        #expect(store.bonds().map(\.address) == [old[3].address, VirtualRadioTests.a])
        #expect(result.bondsEvicted == Array(old.prefix(3)))
    }

    /// A peer whose bond is stored under another address (matched by the link address
    /// it kept) pairs again at the limit: its new bond takes that bond's place, so it
    /// counts once and nothing is refused or removed to make room. (Before, the new bond
    /// went under the link address, a second bond for one peer, and the limit refused it.)
    @Test func aPeerBondedUnderAnotherAddressPairsAgainInItsPlace() async throws {
        var live = Self.stranger(9)
        live.linkAddresses = [Bond.LinkAddress(address: VirtualRadioTests.a, type: .public)]
        let (result, store, events, _) = try await Self.pair(limit: BondLimit(maximum: 1), stored: [live])
        #expect(result.bonding && result.security.bonded && result.bondNotStored == nil)
        #expect(store.bonds().map(\.address) == [live.address])
        #expect(store.bonds().first?.linkAddresses == live.linkAddresses)
        #expect(store.bonds().first?.keys.peerLTK != live.keys.peerLTK)
        #expect(!events.contains { if case .bondEvicted = $0 { true } else { false } }, "\(events)")
    }

    @Test func aPeerAlreadyBondedIsReplacedInPlaceAndCountsOnce() {
        let old = (1...2).map(Self.stranger)
        let limit = BondLimit(maximum: 2)
        var again = old[0]
        again.keys.peerCSRK = Array(repeating: 1, count: 16)
        #expect(limit.room(for: again, among: old, connected: { _ in false }) == [])
        #expect(limit.room(for: Self.stranger(3), among: old, connected: { _ in false }) == nil)
        #expect(BondLimit(maximum: 3).room(for: Self.stranger(3), among: old, connected: { _ in false }) == [])
        #expect(BondLimit(maximum: 2, whenFull: .replaceOldest).room(for: Self.stranger(3), among: old, connected: { $0 == old[0] }) == [old[1]])
        #expect(BondLimit(maximum: 0, whenFull: .replaceOldest).room(for: Self.stranger(3), among: [], connected: { _ in false }) == nil)
        #expect(BondLimit(maximum: -5).maximum == 0)
    }
}
