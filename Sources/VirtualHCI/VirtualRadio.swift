// An in-process radio with software LE controllers, for deterministic end-to-end
// tests and the no-hardware demo. Each `VirtualController` is an `HCITransport` that
// answers HCI the way an LE controller does; the `VirtualRadio` actor relays between
// them: advertising reaches scanners (with an RSSI from a path-loss model), LE Create
// Connection completes on both sides, ACL data is relayed with the controller's
// buffer accounting (Number Of Completed Packets), Disconnect ends the link on both
// sides with its reason.
//
// Time: advertising is reported when a scanner starts scanning, when an advertiser
// starts advertising or changes its data, and on every `tick()` (the test decides
// when time passes, or `tick(every:)` makes ticks a timer on the radio's loop); a tick
// is one advertising event of every set (an event limit counts them). An advertising
// set's Duration and the ticker run on the loop's clock. Everything a host sends is
// handled in order, so a run with the same host commands gives the same bytes on
// every controller.

import Foundation
import HCI
import NIOCore
import NIOPosix

public actor VirtualRadio: LoopIsolated {
    /// The radio, its controllers and (by default) the hosts on them run on this loop:
    /// one thread, no hand-off between threads, the same order every run.
    public nonisolated let loop: any EventLoop
    /// The loop's actors' executor (held here: `unownedExecutor` does not keep it).
    public nonisolated let loopExecutor: LoopExecutor
    public nonisolated let unownedExecutor: UnownedSerialExecutor
    /// RSSI at the scanner for a distance in metres: log-distance path loss,
    /// RSSI = txPower − 41 dB (at 1 m) − 10·n·log10(d), n = `pathLossExponent`.
    public var pathLossExponent = 2.0
    private var controllers: [VirtualController] = []
    /// Where the search for a new link's handles starts (`linkHandles()`).
    var nextHandle: UInt16 = 0x0040
    // `@exclusivity(unchecked)` below: state on the loop alone, and no access to it calls
    // out while under way (docs/architecture.md, "Decisions worth knowing").
    @exclusivity(unchecked) var links: [Link] = []
    /// Distances in metres between controller pairs (default 1 m).
    private var distances: [Pair: Double] = [:]

    struct Pair: Hashable {
        var a: BluetoothAddress, b: BluetoothAddress
        init(_ x: BluetoothAddress, _ y: BluetoothAddress) { (a, b) = x.description < y.description ? (x, y) : (y, x) }
    }

    struct Link {
        var central: VirtualController
        var centralHandle: UInt16
        var peripheral: VirtualController
        var peripheralHandle: UInt16
        /// LE data length on air each way (VirtualDataLength.swift): what each side
        /// sends per PDU.
        var centralTx: VirtualDataLength
        var peripheralTx: VirtualDataLength
        /// The PHY each way (1 LE 1M, 2 LE 2M): LE 1M until a host updates it (§7.8.49).
        var phyCentralToPeripheral: UInt8 = 1
        var phyPeripheralToCentral: UInt8 = 1
        /// The key the central started encryption with, until the peripheral's host answers.
        var pendingKey: [UInt8]?
        /// EDIV and Rand of that start, until the peripheral's host is asked.
        var pendingRequest: (ediv: UInt16, rand: UInt64)?
        var encrypted = false
    }

    /// `loop`: by default one of NIO's shared loops.
    public init(loop: (any EventLoop)? = nil) {
        self.loop = loop ?? MultiThreadedEventLoopGroup.singleton.next()
        self.loopExecutor = LoopExecutor.of(self.loop)
        self.unownedExecutor = loopExecutor.asUnownedSerialExecutor()
    }

    /// Adds a controller with this public address; with `extendedAdvertising`, one
    /// that also has the Bluetooth 5 extended advertising, scanning and connection
    /// commands (a host then drives it with those).
    ///
    /// `hostLoop`: the loop the controller's host should run on (its `preferredLoop`).
    /// By default the radio's own, so the radio, its controllers and their hosts share
    /// one thread and a run with the same host commands gives the same bytes every
    /// time. A host on a loop of its own (a host per core, as devices are) runs beside
    /// the others; packets cross between its loop and the radio's in order, in batches,
    /// but how two such hosts' packets interleave on the radio then depends on the
    /// threads' timing.
    public func makeController(address: BluetoothAddress, extendedAdvertising: Bool = false, hostLoop: (any EventLoop)? = nil) -> VirtualController {
        let c = VirtualController(radio: self, loop: loop, hostLoop: hostLoop, address: address, extendedAdvertising: extendedAdvertising)
        controllers.append(c)
        return c
    }

    /// Takes `c` off the radio, as a device that vanished (its host went away): its
    /// links end for their peers with Connection Timeout (0x08, what a peer's
    /// controller reports when the other side falls silent), what it advertised or
    /// broadcast periodically is no longer heard, and it is closed.
    public func remove(_ c: VirtualController) async {
        guard controllers.contains(where: { $0 === c }) else { return }
        controllers.removeAll { $0 === c }
        let ended = links.filter { $0.central === c || $0.peripheral === c }
        links.removeAll { $0.central === c || $0.peripheral === c }
        for l in ended {
            let (peer, handle) = l.central === c ? (l.peripheral, l.peripheralHandle) : (l.central, l.centralHandle)
            await peer.disconnected(handle: handle, reason: .connectionTimeout)
        }
        await periodicTrainsEnded(c)
        await c.close()
    }

    public func setDistance(_ metres: Double, between a: BluetoothAddress, and b: BluetoothAddress) {
        distances[Pair(a, b)] = Swift.max(0.1, metres)
    }

    func rssi(from advertiser: VirtualController, to scanner: VirtualController) -> Int8 {
        let d = distances[Pair(advertiser.address, scanner.address)] ?? 1
        let v = Double(advertiser.onLoop { $0.txPower }) - 41 - 10 * pathLossExponent * log10(d)
        return Int8(Swift.max(-127, Swift.min(20, v.rounded())))
    }

    /// Lets time pass: every advertiser is heard once more by every scanner, one
    /// advertising event of each of its sets, and one periodic event of every train.
    /// Synchronous on the radio's loop (its controllers share it), so a tick lands
    /// between two packets, never inside one's handling.
    public func tick() {
        let scanners = controllers.filter { $0.onLoop { $0.isScanning } }
        for a in controllers {
            let on = a.onLoop { $0.broadcasts }
            guard !on.isEmpty else { continue }
            for s in scanners where s !== a {
                let rssi = rssi(from: a, to: s)
                s.onLoop { $0.hear(on, rssi: rssi) }
            }
            a.onLoop { $0.advertisingEvent() }
        }
        // One periodic event of every train, to the scanners synchronised to it.
        for a in controllers {
            let trains = a.onLoop { $0.periodicTrains }
            guard !trains.isEmpty else { continue }
            for s in controllers where s !== a {
                let rssi = rssi(from: a, to: s)
                s.onLoop { $0.hearPeriodic(trains, rssi: rssi) }
            }
        }
    }

    /// Lets time pass on the radio's own clock: a `tick()` now and then every
    /// `interval` of the loop's time, until the task is cancelled or the loop ends.
    /// The ticks are the loop's scheduled tasks, so on a `NIOAsyncTestingEventLoop`
    /// advertising is heard only as the test moves the loop's time, and on a real loop
    /// they run between packets, in the order the loop takes its work. The task keeps
    /// the radio while it runs.
    public nonisolated func tick(every interval: Duration) -> RepeatedTask {
        precondition(interval > .zero, "a radio ticks at a positive interval, not \(interval)")
        return loop.scheduleRepeatedTask(initialDelay: .zero, delay: TimeAmount(interval)) { _ in self.onLoop { $0.tick() } }
    }

    /// What every controller but `c` has on air.
    func broadcasts(except c: VirtualController) async -> [AirAdvertisement] {
        var out: [AirAdvertisement] = []
        for a in controllers where a !== c { out += await a.broadcasts }
        return out
    }

    /// The periodic trains of every controller but `c`.
    func periodicTrains(except c: VirtualController) async -> [PeriodicTrain] {
        var out: [PeriodicTrain] = []
        for a in controllers where a !== c { out += await a.periodicTrains }
        return out
    }

    /// `a` stopped periodic advertising (or was reset): the others' syncs to what is
    /// no longer on air start their Sync_Timeout.
    func periodicTrainsEnded(_ a: VirtualController) async {
        for s in controllers where s !== a { await s.periodicTrainsChanged(onAir: await periodicTrains(except: s)) }
    }

    // MARK: From controllers

    func advertisingStarted(_ a: VirtualController) async {
        let on = await a.broadcasts
        for s in controllers where s !== a { await s.hear(on, rssi: rssi(from: a, to: s)) }
        // A central waiting for this advertiser connects now.
        for c in controllers where c !== a {
            let targets = await c.initiatingTargets
            if !targets.isEmpty, let b = await connectable(await a.broadcasts, at: targets, by: c) {
                await connect(central: c, peripheral: a, via: b)
            }
        }
    }

    func scanningStarted(_ s: VirtualController) async {
        for a in controllers where a !== s {
            let on = await a.broadcasts
            if !on.isEmpty { await s.hear(on, rssi: rssi(from: a, to: s)) }
        }
    }

    func createConnection(from c: VirtualController) async {
        // The advertiser using a target address now (its public or random address).
        let targets = await c.initiatingTargets
        for p in controllers where p !== c {
            guard let b = await connectable(await p.broadcasts, at: targets, by: c) else { continue }
            return await connect(central: c, peripheral: p, via: b)
        }
    }

    /// Among `broadcasts`, the first from one of `addresses` that `central`'s pending connection may connect to.
    private func connectable(_ broadcasts: [AirAdvertisement], at addresses: [BluetoothAddress], by central: VirtualController) async -> AirAdvertisement? {
        let (initiator, extended, phys) = (await central.initiatingAddress, await central.initiatingExtended, await central.initiatingPHYs)
        return broadcasts.first { addresses.contains($0.address) && $0.accepts(initiator: initiator.0, type: initiator.1, extended: extended, phys: phys) }
    }

    private func connect(central: VirtualController, peripheral: VirtualController, via b: AirAdvertisement) async {
        guard let (ch, ph) = linkHandles() else { return }  // every handle held: no link is made
        // Each side starts with what its host suggested (LE Write Suggested Default Data Length).
        let (c, p) = (await central.suggestedDataLength, await peripheral.suggestedDataLength)
        var link = Link(central: central, centralHandle: ch, peripheral: peripheral, peripheralHandle: ph,
                        centralTx: VirtualDataLength(octets: c.octets, time: c.time), peripheralTx: VirtualDataLength(octets: p.octets, time: p.time))
        // The link starts on the PHY its connection request went on: an extended
        // advertisement's secondary PHY (Vol 6, Part B). Rootcanal 1.10 starts every link on LE 1M.
        (link.phyCentralToPeripheral, link.phyPeripheralToCentral) = (b.linkPHY, b.linkPHY)
        links.append(link)
        let initiating = await central.initiatingAddress
        let parameters = await central.initiatingParameters(heardOn: b.primaryPHY)
        await peripheral.connected(handle: ph, role: .peripheral, peer: initiating, set: b.set, parameters: parameters)
        await central.connected(handle: ch, role: .central, peer: (b.address, b.addressType), parameters: parameters)
        // Above 27 octets either way: the controllers run the data length update at once.
        if link.centralTx != .initial || link.peripheralTx != .initial { dataLengthChanged(link) }
    }

    /// The handles of a new link, the central's and the peripheral's: the next pair
    /// from 0x0040 up that no link holds, back to 0x0040 after 0x0EFF (the highest a
    /// controller may report, Vol 4, Part E, §5.4.2), so a radio that has made
    /// thousands of links still reports handles its hosts can address; nil when every
    /// pair is held (1,888 links). The first 1,888 links get 0x0040, 0x0042, … in turn,
    /// the same every run.
    func linkHandles() -> (UInt16, UInt16)? {
        let first: UInt16 = 0x0040
        let pairs = Int(ACLDataPacket.maximumConnectionHandle + 1 - first) / 2
        var held = Set<UInt16>()
        for l in links { held.insert(l.centralHandle); held.insert(l.peripheralHandle) }
        var h = nextHandle
        for _ in 0..<pairs {
            if h + 1 > ACLDataPacket.maximumConnectionHandle || h < first { h = first }
            if !held.contains(h), !held.contains(h + 1) {
                nextHandle = h + 2
                return (h, h + 1)
            }
            h += 2
        }
        return nil
    }

    /// The link `sender` knows as `handle`.
    func linkIndex(_ sender: VirtualController, _ handle: UInt16) -> Int? {
        links.firstIndex { ($0.central === sender && $0.centralHandle == handle) || ($0.peripheral === sender && $0.peripheralHandle == handle) }
    }

    /// On the loop: hands `packet` to the other end of `sender`'s link.
    func relay(_ packet: ACLDataPacket, from sender: VirtualController) -> Bool {
        guard let i = linkIndex(sender, packet.handle) else { return false }
        // The fields this needs, read in place (a copy of the link retains all it holds).
        let fromCentral = links[i].central === sender
        let (to, handle) = fromCentral ? (links[i].peripheral, links[i].peripheralHandle) : (links[i].central, links[i].centralHandle)
        // Controller to host, LE: the first fragment is "first automatically flushable".
        // Data longer than the link's air PDUs reaches the peer's host as one ACL packet
        // per air PDU, as a real peer controller delivers it.
        var boundary: ACLPacketBoundary = packet.boundary == .continuing ? .continuing : .firstFlushable
        let step = Int(fromCentral ? links[i].centralTx.octets : links[i].peripheralTx.octets)
        var offset = 0
        repeat {
            let end = Swift.min(packet.data.count, offset + step)
            let piece = offset == 0 && end == packet.data.count ? packet.data : Array(packet.data[offset..<end])
            to.onLoop(ACLDataPacket(handle: handle, boundary: boundary, data: piece)) { $0.deliver($1) }
            boundary = .continuing
            offset = end
        } while offset < packet.data.count
        return true
    }

    /// LE Enable Encryption from `sender`: only the link's central may start it, and
    /// not while a start is pending. Returns false to refuse (Command Disallowed).
    func startEncryption(_ sender: VirtualController, handle: UInt16, key: [UInt8], ediv: UInt16, rand: UInt64) -> Bool {
        guard let i = linkIndex(sender, handle), links[i].central === sender, links[i].pendingKey == nil else { return false }
        links[i].pendingKey = key
        links[i].pendingRequest = (ediv, rand)
        return true
    }

    /// After the central's Command Status: its peer's host is asked for the key.
    func requestKey(_ sender: VirtualController, handle: UInt16) async {
        guard let i = linkIndex(sender, handle), let (ediv, rand) = links[i].pendingRequest else { return }
        links[i].pendingRequest = nil
        let l = links[i]
        await l.peripheral.longTermKeyRequested(handle: l.peripheralHandle, ediv: ediv, rand: rand)
    }

    /// The peripheral's host answered the LTK request: the same key encrypts the link
    /// (Encryption Change, or Key Refresh Complete when it already was); a different
    /// key ends it with MIC Failure, as the controllers' first encrypted PDU would; no
    /// key (negative reply) fails the central's start with PIN or Key Missing.
    func keyReply(_ sender: VirtualController, handle: UInt16, key: [UInt8]?) async {
        guard let i = linkIndex(sender, handle), links[i].peripheral === sender, let pending = links[i].pendingKey else { return }
        links[i].pendingKey = nil
        let l = links[i]
        guard let key else {
            await l.central.encryptionChanged(handle: l.centralHandle, status: .pinOrKeyMissing, enabled: l.encrypted, refresh: false)
            return
        }
        guard key == pending else {
            links.remove(at: i)
            await l.central.disconnected(handle: l.centralHandle, reason: .connectionTerminatedDueToMICFailure)
            await l.peripheral.disconnected(handle: l.peripheralHandle, reason: .connectionTerminatedDueToMICFailure)
            return
        }
        let refresh = l.encrypted
        links[i].encrypted = true
        await l.peripheral.encryptionChanged(handle: l.peripheralHandle, status: .success, enabled: true, refresh: refresh)
        await l.central.encryptionChanged(handle: l.centralHandle, status: .success, enabled: true, refresh: refresh)
    }

    func disconnect(_ sender: VirtualController, handle: UInt16, reason: HCIStatus) async -> Bool {
        guard let i = linkIndex(sender, handle) else { return false }
        let l = links.remove(at: i)
        let (peer, peerHandle) = l.central === sender ? (l.peripheral, l.peripheralHandle) : (l.central, l.centralHandle)
        await sender.disconnected(handle: handle, reason: .connectionTerminatedByLocalHost)
        await peer.disconnected(handle: peerHandle, reason: reason)
        return true
    }

    func peer(of sender: VirtualController, handle: UInt16) -> VirtualController? {
        guard let i = linkIndex(sender, handle) else { return nil }
        let l = links[i]
        return l.central === sender ? l.peripheral : l.central
    }

    func connectionUpdated(_ sender: VirtualController, handle: UInt16, interval: UInt16, latency: UInt16, timeout: UInt16) async {
        guard let i = linkIndex(sender, handle) else { return }
        let l = links[i]
        await l.central.connectionUpdateComplete(handle: l.centralHandle, interval: interval, latency: latency, timeout: timeout)
        await l.peripheral.connectionUpdateComplete(handle: l.peripheralHandle, interval: interval, latency: latency, timeout: timeout)
    }
}
