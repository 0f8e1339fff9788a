// Privacy (Vol 3, Part C, §10.7; Vol 6, Part B, §1.3.2.2): with `SecurityOptions.privacy`
// the host advertises, scans actively and connects from a resolvable private address
// made from its own IRK, and replaces it every `rotation`; pairing distributes the IRK
// and the identity address, so a bonded peer recognises every address it will use.
// Peers' private addresses are resolved here with the IRKs of the bonds.
//
// Our address: one RPA per rotation period ("generation"), made on first use. The
// controller's random address (LE Set Random Address: scanning, connecting, legacy
// advertising) and advertising set 0's (extended advertising) each take the current
// generation's RPA the next time they may change: LE Set Random Address is refused
// while legacy advertising, scanning or initiating runs (§7.8.4), so an address that
// expires then is replaced when they stop, as BlueZ and Bumble do; advertising, which
// shows the address to everyone, is restarted with the new one when its period ends.

import GAP
import HCI
import Logging
import NIOCore
import SMP

/// The host's own privacy.
public struct PrivacyOptions: Sendable, Hashable {
    /// How long one resolvable private address is used (TGAP(private_addr_int):
    /// 15 minutes recommended, which BlueZ and Android use).
    public var rotation: Duration
    /// Give the bonds' IRKs to the controller's resolving list when it has one (LL
    /// privacy): it then reports and connects bonded peers by identity address
    /// (types 0x02/0x03) whatever private address they use, in device privacy mode
    /// (a peer that uses its identity address is still heard). Peers beyond the
    /// list's size, and every peer on a controller without one, are resolved here.
    public var controllerResolution: Bool

    public init(rotation: Duration = .seconds(900), controllerResolution: Bool = true) {
        self.rotation = rotation
        self.controllerResolution = controllerResolution
    }
}

/// The host's addresses under privacy.
struct OwnAddresses {
    var identity: IdentityKey?
    /// Rotation periods so far; each has its own RPA.
    var generation = 0
    /// This generation's RPA, once made.
    var current: BluetoothAddress?
    /// This generation's RPAs of advertising sets other than 0, once made.
    var setAddresses: [UInt8: BluetoothAddress] = [:]
    /// What the controller's random address holds, and from which generation.
    var controller: (address: BluetoothAddress, generation: Int)?
    var timer: LoopTimer?
    /// Peers' private addresses resolved to bonded identities (bounded; cleared when bonds change).
    var resolved: [BluetoothAddress: (address: BluetoothAddress, type: AddressType)?] = [:]
    /// The controller's resolving list: whether it is used, its size, the entries in it
    /// (identity → IRK), and whether the bonds changed since it was last brought in line.
    var resolvingList: ResolvingList?
    /// One bringing of the resolving list in line at a time: a second caller (a scan
    /// about to start) waits for the one under way, then finds the list as it left it.
    var resolvingTurn = Turnstile()
}

struct ResolvingList {
    struct Entry: Hashable { var address: BluetoothAddress; var type: UInt8; var irk: [UInt8] }
    var capacity: Int
    var entries: Set<Entry> = []
    var stale = true
    var privacyMode: Bool
}

extension BluetoothHost {
    /// Whether the host uses private addresses (`SecurityOptions.privacy`).
    public nonisolated var usesPrivacy: Bool { securityOptions.privacy != nil }

    /// Our identity under privacy: the IRK pairing distributes and the identity
    /// address (the controller's public address, else a static random one kept in the
    /// bond store). Nil without privacy or before `start()`.
    public var identity: IdentityKey? { own.identity }

    /// The resolvable private address the host uses now (nil without privacy).
    public var privateAddress: BluetoothAddress? { own.controller?.address }

    /// The own address type advertising, scanning and connecting commands carry.
    nonisolated var ownAddressType: AddressType { usesPrivacy ? .random : .public }

    /// At `start()` and after `reset()`: our identity (made and stored on first use),
    /// pairing told to distribute it, the first RPA in the controller, the rotation timer.
    func startPrivacy(_ info: ControllerInfo) async throws {
        guard let options = securityOptions.privacy else { return }
        let identity = try own.identity ?? loadIdentity(info)
        own.identity = identity
        var pairing = await security.configuration
        pairing.identity = identity
        pairing.keys.insert(.identityKey)
        await security.setConfiguration(pairing)
        // A reset controller forgot its random address.
        own.controller = nil
        try await setControllerAddress(newRPA())
        armRotation(options.rotation)
        own.resolvingList = nil
        let commands: [HCIOpcode] = [.leAddDeviceToResolvingList, .leRemoveDeviceFromResolvingList, .leClearResolvingList,
                                     .leReadResolvingListSize, .leSetAddressResolutionEnable]
        if options.controllerResolution, info.leFeatures.contains(bit: LEFeatures.privacy), commands.allSatisfy(info.supports) {
            do {
                try await controller.send(LEClearResolvingList())
                let size = Int(try await controller.send(LEReadResolvingListSize()).value)
                own.resolvingList = ResolvingList(capacity: size, privacyMode: info.supports(.leSetPrivacyMode))
                await syncResolvingList()
            } catch {
                logger.info("the controller's resolving list is not used", metadata: ["error": "\(error)"])
            }
        }
    }

    func loadIdentity(_ info: ControllerInfo) throws -> IdentityKey {
        let store = securityOptions.store
        if let stored = try store.localIdentity() { return stored }
        let random = securityOptions.random
        var identity = IdentityKey(irk: random.bytes(16), address: info.address, addressType: .public)
        if info.address == .zero {
            // No public address: a static random identity (top bits 0b11, §1.3.2.1).
            var octets = random.bytes(6)
            octets[5] |= 0xC0
            identity.address = (try? BluetoothAddress(wireBytes: octets)) ?? .zero
            identity.addressType = .random
        }
        try store.saveLocalIdentity(identity)
        logger.info("privacy identity created", metadata: ["ble.identity": "\(identity.address)"])
        return identity
    }

    /// This generation's RPA (made on first use).
    func newRPA() -> BluetoothAddress {
        if let a = own.current { return a }
        let a = makeRPA()
        own.current = a
        return a
    }

    /// A fresh RPA from our IRK.
    func makeRPA() -> BluetoothAddress {
        // generate returns nil only for a malformed IRK, which loadIdentity never makes.
        own.identity.flatMap { ResolvablePrivateAddress.generate(irk: $0.irk, random: securityOptions.random) } ?? .zero
    }

    func armRotation(_ every: Duration) {
        own.timer?.cancel()
        own.timer = LoopTimer(after: every, on: controller.loop) { [weak self] in
            guard let self else { return }
            Task { await self.rotationDue(every) }
        }
    }

    /// Starts a new rotation period now (as when the period ends): advertising moves
    /// to a new private address, scanning and connecting as soon as they may.
    public func rotatePrivateAddress() async {
        guard let options = securityOptions.privacy else { return }
        await rotationDue(options.rotation)
    }

    /// The period ended: a new generation; advertising moves to its RPA now, the
    /// controller's random address as soon as nothing forbids the change.
    func rotationDue(_ every: Duration) async {
        own.generation += 1
        own.current = nil
        own.setAddresses.removeAll()
        armRotation(every)
        guard state == .ready else { return }
        logger.debug("private address expired", metadata: ["ble.generation": "\(own.generation)"])
        // Sets that made a link still up are stopped: they take a new address when they
        // resume. A set with an event limit keeps its address until it ends (a restart
        // would count its events again).
        let advertising = peripheralState.setsOnAir.filter { peripheralState.advertising[$0]?.maximumEvents == nil }
        if !advertising.isEmpty, usesExtendedCommands || (centralState.scans.isEmpty && centralState.connectWaiter == nil) {
            // After any change under way, with what the application asks for then.
            await restartAdvertising(advertising, "advertising did not restart with a new private address", forPeriod: own.generation)
        } else {
            await refreshControllerAddress()
        }
    }

    /// Whether LE Set Random Address may be sent now (§7.8.4): no scan running (but the
    /// one `startingScan`, not yet enabled), no connection attempt, no legacy
    /// advertising (or it is stopped: `advertisingStopped`).
    func controllerAddressMayChange(advertisingStopped: Bool = false, startingScan: Bool = false) -> Bool {
        centralState.scans.count <= (startingScan ? 1 : 0) && centralState.connectWaiter == nil && (usesExtendedCommands || peripheralState.advertising.isEmpty || advertisingStopped)
    }

    /// Before scanning or connecting under privacy: the current RPA into the controller
    /// when it holds an older one and may change it; else the older one serves.
    func refreshControllerAddress(startingScan: Bool = false) async {
        await syncResolvingList(startingScan: startingScan)
        guard usesPrivacy, own.controller?.generation != own.generation, controllerAddressMayChange(startingScan: startingScan) else { return }
        do { try await setControllerAddress(newRPA()) } catch {
            logger.debug("private address not changed", metadata: ["error": "\(error)"])
        }
    }

    func setControllerAddress(_ a: BluetoothAddress) async throws {
        let generation = own.generation
        try await controller.send(LESetRandomAddress(randomAddress: a))
        controllerAddressSet(a, generation: generation)
    }

    /// LE Set Random Address went out with `a` (here or inside legacy advertising's start),
    /// made in period `generation`: recorded as that period's, not the current one, since
    /// a period may have ended while the command was out (its own restart then needs a
    /// new address).
    func controllerAddressSet(_ a: BluetoothAddress, generation: Int) {
        own.controller = (a, generation)
        // Legacy advertising shares the controller's random address with connecting.
        let role: ConnectionRole? = usesExtendedCommands ? .central : nil
        security.onLoop { $0.setOwnAddress(a, type: .random, role: role) }
    }

    /// Legacy advertising's start: the address to set with it (advertising is stopped
    /// then), or nil when the controller's serves or may not change.
    func legacyAdvertisingAddress() -> BluetoothAddress? {
        guard usesPrivacy, own.controller?.generation != own.generation, controllerAddressMayChange(advertisingStopped: true) else { return nil }
        return newRPA()
    }

    /// Extended advertising's start: the address of advertising set `set` under
    /// privacy. Set 0 has the current RPA, which scanning and connecting use too; every
    /// other set has an RPA of its own, made once per rotation period, so a scanner
    /// cannot tell that two sets come from one device (unless it holds our IRK).
    func advertisingSetAddress(_ set: UInt8) -> BluetoothAddress? {
        guard usesPrivacy else { return nil }
        if set == 0 { return newRPA() }
        if let a = own.setAddresses[set] { return a }
        let a = makeRPA()
        own.setAddresses[set] = a
        return a
    }

    /// Advertising set `set` now advertises from `a`: links it makes have it as ours
    /// (set 0's by default, another set's once LE Advertising Set Terminated names it).
    func advertisingSetAddressSet(_ a: BluetoothAddress, set: UInt8) {
        security.onLoop { sm in
            if set == 0 { sm.setOwnAddress(a, type: .random, role: .peripheral) }
            sm.setOwnAddress((a, .random), advertisingSet: set)
        }
    }

    // MARK: Peers' private addresses

    /// The bonded identity a peer's address stands for: itself when the controller
    /// resolved it (type 0x02/0x03); else the identity of the bond with an IRK that
    /// `Bond.matches` the address (its identity — Rootcanal 1.10 reports a resolved
    /// address with type 0x00/0x01 —, a link address, or an RPA its IRK resolves);
    /// else nil. Remembered (at most 1024 addresses).
    func identity(of address: BluetoothAddress, type: AddressType) -> (address: BluetoothAddress, type: AddressType)? {
        if type == .publicIdentity || type == .randomIdentity { return (address, AddressType(rawValue: type.rawValue & 1)) }
        guard usesPrivacy || type == .random else { return nil }
        if let known = own.resolved[address] { return known }
        let bonds = (try? securityOptions.store.bonds()) ?? []
        let found = bonds.first { $0.keys.peerIdentity != nil && $0.matches(address, type: type) }.map { ($0.address, $0.addressType) }
        if own.resolved.count >= 1024 { own.resolved.removeAll() }
        own.resolved[address] = .some(found)
        return found
    }

    /// Bonds changed: forget resolutions (a new IRK may resolve an address seen before);
    /// the resolving list follows when the controller next allows it, and a scan
    /// through the accept list starts again when its resolving list fell behind or the
    /// controller can no longer tell the list's devices alone.
    func bondsChanged() {
        own.resolved.removeAll()
        own.resolvingList?.stale = true
        Task {
            await self.syncResolvingList()
            await self.rescanForChangedBonds()
        }
    }

    /// Brings the controller's resolving list in line with the bonds: address
    /// resolution off, entries of forgotten bonds removed, new bonds' IRKs added (with
    /// our IRK as the local one, device privacy mode), resolution on. The controller
    /// refuses these while it advertises, scans or initiates (§7.8.38), so the list
    /// waits for a moment when it does none of them (`advertisingStopped`: the caller
    /// stopped advertising to restart it; `startingScan`: the one scan is not enabled yet).
    func syncResolvingList(advertisingStopped: Bool = false, startingScan: Bool = false) async {
        while !own.resolvingTurn.enter() { await withCheckedContinuation { own.resolvingTurn.wait($0) } }
        defer { own.resolvingTurn.leave() }
        guard var list = own.resolvingList, list.stale, let local = own.identity?.irk, state == .ready || state == .initializing,
              centralState.scans.count <= (startingScan ? 1 : 0), centralState.connectWaiter == nil, peripheralState.advertising.isEmpty || advertisingStopped else { return }
        list.stale = false
        own.resolvingList = list
        let bonds = ((try? securityOptions.store.bonds()) ?? []).compactMap { b -> ResolvingList.Entry? in
            guard let irk = b.keys.peerIdentity?.irk, irk.count == 16 else { return nil }
            return ResolvingList.Entry(address: b.address, type: b.addressType.rawValue & 1, irk: irk)
        }
        let wanted = Set(bonds.prefix(list.capacity))
        do {
            try await controller.send(LESetAddressResolutionEnable(enable: false))
            for e in list.entries.subtracting(wanted) {
                _ = try? await controller.send(LERemoveDeviceFromResolvingList(peerIdentityAddressType: AddressType(rawValue: e.type), peerIdentityAddress: e.address))
                list.entries.remove(e)
            }
            for e in wanted.subtracting(list.entries) {
                let type = AddressType(rawValue: e.type)
                do {
                    try await controller.send(LEAddDeviceToResolvingList(peerIdentityAddressType: type, peerIdentityAddress: e.address, peerIRK: e.irk, localIRK: local))
                    list.entries.insert(e)
                    if list.privacyMode {
                        try await controller.send(LESetPrivacyMode(peerIdentityAddressType: type, peerIdentityAddress: e.address, privacyMode: 1))
                    }
                } catch {
                    // Refused (busy, or full): resolved here meanwhile, tried again next time.
                    list.stale = true
                    logger.debug("resolving list entry refused", metadata: ["ble.peer": "\(e.address)", "error": "\(error)"])
                }
            }
            try await controller.send(LESetAddressResolutionEnable(enable: true))
        } catch {
            logger.warning("resolving list not updated", metadata: ["error": "\(error)"])
            list.stale = true
        }
        if own.resolvingList != nil {
            list.stale = list.stale || own.resolvingList?.stale == true
            own.resolvingList = list
        }
    }
}
