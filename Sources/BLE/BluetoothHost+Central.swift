// BluetoothHost, central role (used by `Central`): serialised LE Create
// Connection with timeout and cancellation, scans fed from the registry's merged
// view, the GATT peer of a link.

import ATT
import GAP
import GATT
import HCI
import L2CAP
import Logging
import NIOCore

extension BluetoothHost {
    // MARK: Central role (used by `Central`)

    /// LE Create Connection to one of `targets`, one attempt at a time (the controller
    /// allows one): to the one directly, to several through the Filter Accept List
    /// (Initiator_Filter_Policy 1), leaving out those connected already. On timeout or
    /// cancellation sends LE Create Connection Cancel.
    func connect(toAnyOf peers: [DeviceAddress], within limit: Duration, parameters: LEConnectionParameters,
                 phys: Set<PHY> = [.le1M]) async throws -> Connection {
        await settle()
        try requireReady()
        guard phys.allSatisfy(\.isKnown), phys.contains(.le1M) || phys.contains(.leCoded) else {
            throw BLEError.invalidArgument("a connection is initiated on LE 1M, LE Coded or both (LE 2M beside one of them), not \(phys.map(\.description).sorted())")
        }
        if let fault = parameters.fault { throw BLEError.invalidArgument("connect: \(fault)") }
        guard phys == [.le1M] || usesExtendedCommands else {
            throw BLEError.notSupported("initiating on \(phys.map(\.description).sorted().joined(separator: " and ")) needs a controller driven with the extended commands (usesExtendedCommands)")
        }
        let targets = peers.withoutDuplicates
        guard !targets.isEmpty else { throw BLEError.invalidArgument("connecting needs at least one peer") }
        func linked(_ t: DeviceAddress) -> Connection? {
            links.active.values.first { $0.peer == t.address && $0.role == .central && !centralState.unclaimed.contains($0.id) }
        }
        if targets.count == 1, let c = linked(targets[0]) { return c }
        await acquireConnectSlot()
        defer { releaseConnectSlot() }
        try Task.checkCancellation()
        // A reset may have come while this waited for the slot.
        try requireReady()
        let looking = targets.count == 1 ? targets : targets.filter { linked($0) == nil }
        guard let first = looking.first else {
            throw BLEError.invalidArgument("every one of \(targets.map(\.description).joined(separator: ", ")) is connected already")
        }
        let useList = looking.count > 1
        if useList {
            // Advertising or scanning through the accept list holds the controller's list.
            if let holders = acceptListHolders {
                guard Set(looking) == Set(centralState.controllerAcceptList ?? []) else {
                    throw BLEError.acceptListInUse("the controller's Filter Accept List is held by \(holders): it cannot take other peers meanwhile (stop that, or connect to one peer)")
                }
            } else {
                try await fillFilterAcceptList(looking)
                // A reset that came meanwhile ends the attempt before it starts.
                try requireReady()
            }
        }
        await refreshControllerAddress()
        let own = ownAddressType
        let timeout = targets.count == 1 ? BLEError.connectionTimeout(first.address, within: limit) : BLEError.noConnection(toAnyOf: targets, within: limit)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (k: CheckedContinuation<Connection, any Error>) in
                // Fires on the loop, the host's executor: the connect ends there and then.
                // A link the controller reported before is the connect's already (the host
                // takes each link as the controller's event arrives, on this loop).
                let timer = LoopTimer(after: limit, on: loop) { [weak self] in
                    self?.onLoop { $0.abandonConnect(timeout) }
                }
                centralState.connectWaiter = ConnectWaiter(peers: looking, continuation: k, timer: timer)
                let extended = usesExtendedCommands
                // Through the list the peer's address is ignored (§7.8.12, §7.8.66).
                let (policy, type, peer): (UInt8, AddressType, BluetoothAddress) = useList ? (1, .public, .zero) : (0, first.type, first.address)
                Task {
                    do {
                        if extended {
                            let bits = PHY.bits(phys)
                            try await self.controller.send(LEExtendedCreateConnection(
                                initiatorFilterPolicy: policy, ownAddressType: own, peerAddressType: type, peerAddress: peer, initiatingPHYs: bits,
                                phys: Array(repeating: .init(connection: parameters), count: bits.nonzeroBitCount)))
                        } else {
                            try await self.controller.send(LECreateConnection(initiatorFilterPolicy: policy, peerAddressType: type, peerAddress: peer,
                                                                              ownAddressType: own, connection: parameters))
                        }
                    } catch {
                        self.abandonConnect(error, cancel: false)
                    }
                }
            }
        } onCancel: {
            Task { await self.abandonConnect(CancellationError()) }
        }
    }

    /// Makes the controller's Filter Accept List hold exactly `targets` (in the connect
    /// slot: no connection attempt uses the list meanwhile; advertising that uses it is
    /// off air or holds the same list).
    func fillFilterAcceptList(_ targets: [DeviceAddress]) async throws {
        centralState.controllerAcceptList = nil
        // A resolved identity is listed by its kind (0 public, 1 random).
        try await fillControllerList("Filter Accept List", known: centralState.acceptListSize, remember: { centralState.acceptListSize = $0 },
                                     readSize: LEReadFilterAcceptListSize(), clear: LEClearFilterAcceptList(), adds: targets.map {
                                         LEAddDeviceToFilterAcceptList(addressType: AddressType(rawValue: $0.type.rawValue & 1), address: $0.address)
                                     })
        centralState.controllerAcceptList = targets
    }

    // MARK: The accept list

    /// The devices that advertising with an `AdvertisingFilter` answers alone (a
    /// peripheral that lets only its bonded centrals connect), as Zephyr's
    /// `bt_le_filter_accept_list_add` and NimBLE's `ble_gap_wl_set` keep them, and that
    /// a scan with `acceptListOnly` reports alone (BlueZ's background scan for the
    /// devices it reconnects to): the controller's Filter Accept List takes them when
    /// such advertising or scanning starts. A device with a resolvable private address
    /// is named by its identity address; the controller then resolves it when the host
    /// has its IRK (a bond, under privacy).
    /// `BLEError.invalidArgument` for more than the controller's list holds;
    /// `BLEError.acceptListInUse` for another list while such advertising or scanning
    /// is on (stop it first, as the controller cannot change its list meanwhile). Kept
    /// across `reset()`. `Central.connect(toAnyOf:)` uses the controller's list too:
    /// while such advertising or scanning is on, only for the same devices.
    public func setAcceptList(_ devices: [DeviceAddress]) async throws {
        try requireReady()
        let list = devices.withoutDuplicates
        if let holders = acceptListHolders, Set(list) != Set(centralState.controllerAcceptList ?? []) {
            throw BLEError.acceptListInUse("the controller's Filter Accept List is held by \(holders): stop that before changing the list")
        }
        try await requireRoom("Filter Accept List", for: list.count, known: centralState.acceptListSize, remember: { centralState.acceptListSize = $0 },
                              readSize: LEReadFilterAcceptListSize())
        centralState.acceptList = list
    }

    /// The accept list `setAcceptList` set.
    public var acceptList: [DeviceAddress] { centralState.acceptList }

    /// What holds the controller's Filter Accept List, described: advertisements that
    /// answer the accept list alone and are on air (or wait for a link they made to
    /// end), and scanning through it; nil when nothing does.
    var acceptListHolders: String? {
        let sets = peripheralState.advertising.filter { !$0.value.filter.isEmpty && !peripheralState.advertisingEnded.contains($0.key) }.keys.sorted()
        let holders = sets.map { $0 == 0 ? "the advertisement" : "advertising set \($0)" }
            + (centralState.scanning?.acceptListOnly == true ? ["the scan through it"] : [])
        return holders.isEmpty ? nil : holders.joined(separator: ", ")
    }

    /// Before advertising or scanning through the accept list starts: the controller's
    /// list takes the application's. Between connection attempts only, and never
    /// waiting for one (a link's event handler may be the caller, and the attempt may
    /// wait for that handler): `BLEError.acceptListInUse` while one is under way.
    func holdAcceptList() async throws {
        guard centralState.controllerAcceptList != centralState.acceptList else { return }
        guard !centralState.connectBusy else {
            throw BLEError.acceptListInUse("a connection attempt is under way: the accept list goes to the controller between attempts")
        }
        centralState.connectBusy = true
        defer { releaseConnectSlot() }
        try await fillFilterAcceptList(centralState.acceptList)
    }

    /// Makes one of the controller's lists (the Filter Accept List, the Periodic
    /// Advertiser List) hold exactly what `adds` add: its size is read with `readSize`
    /// the first time (`known` after, kept with `remember`), more entries than it holds
    /// are refused (`BLEError.invalidArgument`), else `clear` and the adds go out in order.
    func fillControllerList<Read: HCICommand>(_ name: String, known: Int?, remember: (Int) -> Void, readSize: Read, clear: some HCICommand,
                                              adds: [some HCICommand]) async throws where Read.ReturnParameters == HCIOctetReturn {
        try await requireRoom(name, for: adds.count, known: known, remember: remember, readSize: readSize)
        try await controller.send(clear)
        for a in adds { try await controller.send(a) }
    }

    /// Refuses (`BLEError.invalidArgument`) `count` entries for a controller list that
    /// holds fewer: its size is `known`, or read with `readSize` the first time (kept
    /// with `remember`).
    func requireRoom<Read: HCICommand>(_ name: String, for count: Int, known: Int?, remember: (Int) -> Void, readSize: Read) async throws
        where Read.ReturnParameters == HCIOctetReturn {
        let size: Int
        if let known {
            size = known
        } else {
            size = Int(try await controller.send(readSize).value)
            remember(size)
        }
        guard count <= size else { throw BLEError.invalidArgument("the controller's \(name) holds \(size) entries, not \(count)") }
    }

    /// Ends the connect in progress with `error`, now; with `cancel`, then tells the
    /// controller to stop trying (LE Create Connection Cancel, sent in the background:
    /// its answer changes nothing for the caller).
    func abandonConnect(_ error: any Error, cancel: Bool = true) {
        guard let w = centralState.connectWaiter else { return }
        centralState.connectWaiter = nil
        w.timer.cancel()
        w.continuation.resume(throwing: error)
        guard cancel else { return }
        // The attempt ends with LE Connection Complete, Unknown Connection Identifier: not
        // the next attempt's end (`connectFailed`). Refused (Command Disallowed: the
        // attempt had ended already), no such event comes.
        centralState.cancelsOwed += 1
        Task {
            do { _ = try await self.controller.send(LECreateConnectionCancel()) } catch { self.cancelAnswered() }
        }
    }

    /// Whether connect `w` waits for a link to `peer`: one of its targets, or the
    /// identity one of them resolves to with a bond's IRK (a controller that resolved
    /// the target's private address through its resolving list names the peer by its
    /// identity in LE Enhanced Connection Complete, §7.7.65.10).
    func isTarget(_ peer: BluetoothAddress, of w: ConnectWaiter) -> Bool {
        w.peers.contains { $0.address == peer || identity(of: $0.address, type: $0.type)?.address == peer }
    }

    private func cancelAnswered() { centralState.cancelsOwed = max(0, centralState.cancelsOwed - 1) }

    func acquireConnectSlot() async {
        if !centralState.connectBusy {
            centralState.connectBusy = true
            return
        }
        await withCheckedContinuation { centralState.connectQueue.append($0) }
    }

    func releaseConnectSlot() {
        if centralState.connectQueue.isEmpty { centralState.connectBusy = false } else { centralState.connectQueue.removeFirst().resume() }
    }

    /// Adds a scan subscriber; scanning starts with the first and stops with the last.
    func startScan(filter: ScanFilter, _ settings: ScanSettings, capacity: Int) async throws -> BufferedStream<ScanResult> {
        try await addScan(filter: filter, settings, capacity: capacity).stream
    }

    /// `startScan`, also returning the subscriber's id (for `finishScan`).
    func addScan(filter: ScanFilter, _ settings: ScanSettings, capacity: Int) async throws -> (id: UInt64, stream: BufferedStream<ScanResult>) {
        await settle()
        try requireReady()
        guard settings.phys != 0, settings.phys & ~0x05 == 0 else {
            throw BLEError.invalidArgument("a scan is on LE 1M, LE Coded or both")
        }
        guard settings.phys == 0x01 || usesExtendedCommands else {
            throw BLEError.notSupported("scanning LE Coded needs a controller driven with the extended commands (usesExtendedCommands)")
        }
        try settings.timing.validate()
        let (stream, cont) = BufferedStream<ScanResult>.makeStream(capacity: capacity)
        let id = centralState.nextScan
        centralState.nextScan += 1
        centralState.scans[id] = ScanSubscriber(filter: filter, settings: settings, continuation: cont)
        // The consumer let go: the scan stops before the program's next operation goes out.
        cont.onTermination = { [weak self] _ in
            guard let host = self else { return }
            host.owe { await host.endScan(id) }
        }
        do {
            try await withScanLock { try await reconcileScan(strict: true) }
        } catch {
            centralState.scans[id] = nil
            throw error
        }
        return (id, stream)
    }

    func endScan(_ id: UInt64) async {
        guard centralState.scans.removeValue(forKey: id) != nil, state == .ready else { return }
        try? await withScanLock { try await reconcileScan(strict: false) }
    }

    /// Runs one change of the controller's scanning after the one under way (a stop
    /// and a start interleaved would leave it scanning for nobody, or not at all).
    func withScanLock(_ body: () async throws -> Void) async throws {
        while !centralState.scanTurn.enter() { await withCheckedContinuation { centralState.scanTurn.wait($0) } }
        defer { centralState.scanTurn.leave() }
        try await body()
    }

    /// How the controller should scan for the scans there are (`ScanSettings.merged`,
    /// in the order they started); nil when there are none.
    var wantedScan: ScanSettings? {
        ScanSettings.merged(centralState.scans.keys.sorted().compactMap { centralState.scans[$0]?.settings })
    }

    /// Makes the controller scan as `wantedScan` says (under `withScanLock`): stopped
    /// and started again when that changed. Scanning through the accept list first
    /// gives the controller the list; when it cannot have it now (a connection attempt
    /// is under way, `holdAcceptList`), a new scan (`strict`) fails with
    /// `BLEError.acceptListInUse` and the controller goes on as it was, while a scan's
    /// end leaves the others to the host's own filter (`received`). The callers check
    /// that the host is ready (or resetting).
    func reconcileScan(strict: Bool) async throws {
        // Before a scan starts, a resolving list that fell behind the bonds comes in
        // line (the controller then knows more of the accept list's devices).
        if centralState.scanning == nil, wantedScan != nil { await refreshControllerAddress(startingScan: true) }
        var want = wantedScan
        if want?.acceptListOnly == true, !controllerKnowsAcceptList { want?.acceptListOnly = false }
        if want?.acceptListOnly == true {
            do {
                try await holdAcceptList()
            } catch BLEError.acceptListInUse(_) where !strict {
                want?.acceptListOnly = false
            }
        }
        guard want != centralState.scanning else { return }
        if centralState.scanning != nil {
            try await stopScanning()
            centralState.scanning = nil
        }
        guard let want else { return }
        try await startScanning(want)
        centralState.scanning = want
    }

    /// The bonds changed while the controller scans through the accept list: a new
    /// bond's device may advertise from private addresses the controller cannot tell
    /// yet, and a removed bond's IRK would let the controller go on telling a device
    /// no longer bonded. So the scan starts again, through the resolving list once it
    /// is in line with the bonds (`reconcileScan` brings the list in line before a scan
    /// starts), else with the host's filter. (Linux's kernel pauses scanning for a
    /// resolving list update too.)
    func rescanForChangedBonds() async {
        do {
            try await withScanLock {
                guard state == .ready, centralState.scanning?.acceptListOnly == true,
                      own.resolvingList?.stale == true || !controllerKnowsAcceptList else { return }
                try await stopScanning()
                centralState.scanning = nil
                try await reconcileScan(strict: false)
            }
        } catch {
            logger.warning("the scan through the accept list did not start again for changed bonds", metadata: ["error": "\(error)"])
        }
    }

    /// Whether the controller tells every device on the accept list by itself: a
    /// bonded device with an IRK may advertise from resolvable private addresses,
    /// which the controller matches to the list's identity address only through its
    /// resolving list (under privacy, once the list holds that bond). Otherwise a scan
    /// through the list is the host's alone (Scanning_Filter_Policy 0, `received`
    /// resolving with the bonds' IRKs), as Linux falls back to when a device uses
    /// private addresses and the controller does not resolve them.
    var controllerKnowsAcceptList: Bool {
        func key(_ a: BluetoothAddress, _ type: UInt8) -> DeviceAddress { DeviceAddress(a, type: AddressType(rawValue: type & 1)) }
        let bonds = (try? securityOptions.store.bonds()) ?? []
        let privateOnes = Set(bonds.filter { $0.keys.peerIdentity?.irk != nil }.map { key($0.address, $0.addressType.rawValue) })
        let resolved = Set((own.resolvingList?.entries ?? []).map { key($0.address, $0.type) })
        return centralState.acceptList.allSatisfy { d in
            let k = key(d.address, d.type.rawValue)
            return !privateOnes.contains(k) || resolved.contains(k)
        }
    }

    private func startScanning(_ s: ScanSettings) async throws {
        await refreshControllerAddress(startingScan: true)
        let own = ownAddressType
        let policy: UInt8 = s.acceptListOnly ? 1 : 0
        try await scanCommand {
            if usesExtendedCommands {
                try await Scanner.enableExtended(controller, active: s.active, filterDuplicates: s.filterDuplicates, interval: s.timing.intervalUnits,
                                                 window: s.timing.windowUnits, ownAddressType: own, filterPolicy: policy, phys: s.phys)
            } else {
                try await Scanner.enable(controller, active: s.active, filterDuplicates: s.filterDuplicates, interval: s.timing.intervalUnits,
                                         window: s.timing.windowUnits, ownAddressType: own, filterPolicy: policy)
            }
        }
    }

    private func stopScanning() async throws {
        try await scanCommand {
            if usesExtendedCommands { try await Scanner.stopExtended(controller) } else { try await Scanner.stop(controller) }
        }
    }

    /// Ends scan `id` so that its stream carries exactly the reports the controller
    /// sent before it answered the scan stop, whatever the threads' timing: when this
    /// was the last scan, the stream finishes once the event follower reaches that
    /// answer; otherwise (the controller keeps scanning for the others) at once.
    func finishScan(_ id: UInt64) async {
        await settle()
        guard let s = centralState.scans.removeValue(forKey: id) else { return }
        guard state == .ready else { return s.continuation.finish() }
        try? await withScanLock {
            guard centralState.scans.isEmpty, centralState.scanning != nil else {
                s.continuation.finish()
                // The others may all scan through the accept list now.
                return try await reconcileScan(strict: false)
            }
            // Draining from before the stop goes out: the host takes reports the
            // controller sends meanwhile while this task still awaits the answer.
            let before = centralState.scanAnswersOwed
            centralState.draining.append((s, before + 1))
            do {
                try await stopScanning()
                centralState.scanning = nil
                finishDrained()
            } catch {
                // An answer with an error status is still an answer the host takes;
                // without one (timed out, transport gone) nothing is left to wait for.
                if centralState.scanAnswersOwed == before { flushDraining() } else { finishDrained() }
            }
        }
    }

    /// Runs a scan enable or disable and counts its answer, which the event follower
    /// also comes to (a Command Complete, with any status).
    private func scanCommand(_ body: () async throws -> Void) async throws {
        do {
            try await body()
            centralState.scanAnswersOwed += 1
        } catch let e as HCIError {
            switch e {
            case let .commandFailed(op, _) where op == .leSetScanEnable || op == .leSetExtendedScanEnable,
                 let .malformedResponse(op, _) where op == .leSetScanEnable || op == .leSetExtendedScanEnable:
                centralState.scanAnswersOwed += 1
            default:
                break
            }
            throw e
        }
    }

    /// Finishes the windowed scans whose stop the event follower has come to.
    func finishDrained() {
        while let d = centralState.draining.first, d.answer <= centralState.scanAnswersSeen {
            centralState.draining.removeFirst()
            d.subscriber.continuation.finish()
        }
    }

    /// Finishes every windowed scan at once (the answers will not come).
    func flushDraining() {
        for d in centralState.draining { d.subscriber.continuation.finish() }
        centralState.draining.removeAll()
        centralState.scanAnswersSeen = centralState.scanAnswersOwed
    }

    /// The peer's GATT server on link `c`, in either role (a central connected to us may
    /// serve a database too); nil once the link is gone.
    public func gattPeer(on c: Connection) -> RemotePeripheral? {
        if let r = links.remotes[c.id] { return r }
        guard isActive(c.id), let client = links.clients[c.id] else { return nil }
        let r = RemotePeripheral(host: self, connection: c, client: client)
        links.remotes[c.id] = r
        return r
    }

    /// True the first time it is asked for link `c` (the central exchanges MTU once).
    func needsMTUExchange(_ c: Connection) -> Bool { links.mtuExchanged.insert(c.id).inserted }
}

extension Array where Element: Hashable {
    /// The elements in order, each once (the first time it comes).
    var withoutDuplicates: [Element] {
        var seen = Set<Element>()
        return filter { seen.insert($0).inserted }
    }
}
