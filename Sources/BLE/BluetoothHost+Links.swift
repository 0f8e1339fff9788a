// BluetoothHost, links: connections and disconnections in both roles as the L2CAP
// host reports them, the per-link GATT client and bearer, why each link ended (so
// operations on a dead link fail with the controller's reason), disconnecting.

import ATT
import GAP
import GATT
import HCI
import L2CAP
import Logging
import NIOCore
import SMP

extension BluetoothHost {
    // MARK: Connections

    /// Connections and disconnections in both roles, as they happen. Buffer: newest 256.
    public nonisolated func connectionEvents() -> BufferedStream<ConnectionEvent> {
        connectionBroadcast.subscribe(capacity: 256)
    }

    /// Every link now up, in both roles.
    public var connections: [Connection] { links.active.values.sorted { $0.handle < $1.handle } }

    /// A link event, taken as the L2CAP host reports it (on the loop, in the controller's
    /// order, before the transport's next packet is read: nothing buffered, nothing to
    /// drop); returns what is left to do that waits (advertising to resume, a link
    /// nobody holds to end), for a task of its own (`react`).
    func take(_ event: L2CAPHost.LinkEvent) -> (@Sendable () async -> Void)? {
        switch event {
        case let .connected(c, interval, latency, timeout):
            let conn = Connection(handle: c.handle, role: c.role, peer: c.peer, peerType: c.peerType, id: links.newLinkID())
            links.active[c.handle] = conn
            // Known with the link: `parameters(of:)` answers as soon as `connections` has it.
            links.parameters[conn.id] = ConnectionParameters(interval: interval, latency: latency, supervisionTimeout: timeout)
            scheduleParameterRequest(conn)
            registry.connected(c.peer, type: c.peerType, handle: c.handle, at: now)
            connectionBroadcast.yield(.connected(conn))
            // One ATT bearer per link carries both GATT roles: the local server answers the
            // peer's requests (the client reading the bearer hands them over), and the client
            // reaches the peer's server, whichever side of the link we are.
            // All set up before the transport's next packet is read: the peer's first PDU
            // finds the bearer open and the server serving the link.
            let bearer = ATTBearer(channel: L2CAPATTChannel(host: l2cap, handle: c.handle), localRxMTU: attMTU, logger: logger)
            let server = self.server, handle = c.handle
            server.onLoop { $0.attachShared(bearer, connection: handle) }
            applySigningKey(handle)
            let client = GATTClient(bearer: bearer, server: server.handler(connection: handle))
            client.onLoop { $0.start() }
            links.clients[conn.id] = client
            if c.role == .peripheral {
                if let set = peripheralState.linksAwaitingSet.removeValue(forKey: c.handle) {
                    peripheralBroadcast.yield(.advertisingConnected(AdvertisingSet(handle: set), central: conn))
                } else if !usesExtendedCommands, peripheralState.advertising[0] != nil {
                    // The legacy commands have one set.
                    peripheralBroadcast.yield(.advertisingConnected(AdvertisingSet(handle: 0), central: conn))
                }
                // The controller stopped advertising for this connection; ask it to go on so
                // more centrals can connect (controllers that cannot refuse, and we wait for the
                // disconnection). Not with the extended commands: Rootcanal 1.10 then never
                // connects to the set again once this link ends (seen in ST03), so an extended
                // set resumes at the disconnection only.
                if peripheralState.advertising[0] != nil, state == .ready, !usesExtendedCommands {
                    return { [weak self] in await self?.advertiseWhileConnected() }
                }
            } else if let w = centralState.connectWaiter, isTarget(c.peer, of: w) {
                centralState.connectWaiter = nil
                w.timer.cancel()
                w.continuation.resume(returning: conn)
            } else {
                // No connect waits for it: the attempt that made it was given up (its time
                // ran out, its caller was cancelled) as the controller made it, LE Create
                // Connection Cancel too late. Nobody holds it, so it ends, as Linux and
                // Android end a link no one holds; connect never hands it out meanwhile.
                logger.info("a link no connect waits for is ended", metadata: ["ble.handle": "\(c.handle)", "ble.peer": "\(c.peer)"])
                centralState.unclaimed.insert(conn.id)
                return { [weak self] in _ = try? await self?.disconnect(conn) }
            }
        case let .linkLayer(c, event):
            // The L2CAP host names the link that had the handle when the controller
            // reported the event, in order with connections and disconnections.
            guard let conn = links.active[c.handle] else { return nil }
            linkOutcomes.yield(.event(conn.id, event))
            linkChanged(conn, event)
        case let .disconnected(c, reason):
            guard let conn = links.remove(c.handle) else { return nil }
            peripheralState.linksAwaitingSet[c.handle] = nil
            let heldNothing = peripheralState.linksHoldingNothing.remove(c.handle) != nil
            centralState.unclaimed.remove(conn.id)
            registry.disconnected(handle: c.handle)
            links.securityRequested.remove(c.handle)
            // The reason first (operations failing on the dead bearer ask for it at once),
            // then the server forgets the link before the next link event is handled: the
            // controller may give the handle to a new link.
            linkEnded(conn, .disconnected(reason))
            endSubscriptions(of: conn)
            connectionBroadcast.yield(.disconnected(conn, reason: reason))
            linkOutcomes.yield(.ended(conn.id, reason))
            server.onLoop(c.handle) { $0.detach(connection: $1) }
            // Advertising stops when a central connects; resume it as asked: the set that
            // made this link (LE Advertising Set Terminated said which), else set 0; none
            // for a link made to an advertisement the controller has replaced since.
            if conn.role == .peripheral, state == .ready, !heldNothing {
                let made = peripheralState.advertisingLinks.filter { $0.value == c.handle }.keys.sorted()
                for s in made { peripheralState.advertisingLinks[s] = nil }
                return { [weak self] in await self?.restartAdvertising(made.isEmpty ? [0] : made, "advertising did not resume") }
            }
        }
        return nil
    }

    /// The legacy set goes on advertising once a central connected, for more centrals
    /// (a controller that cannot refuses, and the set resumes at the disconnection).
    func advertiseWhileConnected() async {
        do {
            try await withAdvertisingLock { if let a = peripheralState.advertising[0], state == .ready { try await startAdvertisingNow(a, set: 0) } }
        } catch { logger.debug("advertising while connected refused", metadata: ["error": "\(error)"]) }
    }

    /// A link-layer event of link `conn` (its procedures' waiters have it already): a
    /// change that succeeded goes to `connectionEvents()`, what the link learned of
    /// the peer is kept for the link's life.
    func linkChanged(_ conn: Connection, _ event: L2CAPHost.LinkLayerEvent) {
        switch event {
        case let .parametersUpdated(u) where u.status.isSuccess:
            links.parameters[conn.id] = ConnectionParameters(u)
            connectionBroadcast.yield(.parametersUpdated(conn, interval: u.connectionInterval, latency: u.peripheralLatency,
                                                         supervisionTimeout: u.supervisionTimeout))
        case let .phyUpdated(u) where u.status.isSuccess:
            connectionBroadcast.yield(.phyUpdated(conn, LinkPHY(tx: PHY(rawValue: u.txPHY), rx: PHY(rawValue: u.rxPHY))))
        case let .dataLengthChanged(d):
            links.dataLengths[conn.id] = DataLength(d)
            connectionBroadcast.yield(.dataLengthChanged(conn, DataLength(d)))
        case let .remoteFeatures(f) where f.status.isSuccess:
            links.remoteFeatures[conn.id] = LEFeatures(rawValue: f.leFeatures)
        case let .remoteVersion(v) where v.status.isSuccess:
            links.remoteVersions[conn.id] = RemoteVersion(v)
        case .parametersUpdated, .phyUpdated, .remoteFeatures, .remoteVersion:
            break
        }
    }

    /// Each enhanced credit-based channel a client opens to SPSM 0x0027 becomes an
    /// enhanced ATT bearer of its connection, served by the local GATT server. EATT
    /// runs over enhanced credit-based mode only: an LE-mode channel to 0x0027 is
    /// closed.
    func serveEnhancedBearers(_ channels: BufferedStream<L2CAPChannel>) async {
        for await channel in channels {
            guard channel.info.enhanced, let conn = links.active[channel.handle] else {
                await channel.close()
                continue
            }
            let bearer = ATTBearer(enhanced: channel, logger: logger)
            await server.attachEnhanced(bearer, connection: channel.handle)
            let mtu = Int(min(channel.info.local.mtu, channel.info.remote.mtu))
            logger.debug("EATT bearer", metadata: ["ble.handle": "\(channel.handle)", "l2cap.cid": "\(channel.info.localCID)", "att.mtu": "\(mtu)"])
            connectionBroadcast.yield(.enhancedBearerAccepted(conn, mtu: mtu))
        }
    }

    // MARK: Security

    /// A Security Manager's event, as it is emitted (on the loop).
    func take(_ e: SecurityEvent) {
        switch e {
        case let .securityChanged(handle, state):
            guard let conn = links.active[handle] else { return }
            links.securityRequested.remove(handle)
            // The server already judges by this (its security source reads the Security
            // Manager's record as each request comes), and a bonded client's record is
            // back (`restoreBondedClient`, as the Security Manager emitted this): what
            // the application sends on this event reaches the restored subscriptions.
            connectionBroadcast.yield(.securityChanged(conn, state))
            // (A layout discovered before the link was encrypted with the bond's key is
            // stored now: `storeLayout`, owed as the Security Manager emitted this.)
        case .bonded:
            // (Subscriptions made before the pairing are stored with the new bond by the
            // Security Manager, the peer's GATT layout by `storeLayout`.) The CSRK the
            // peer distributed verifies its signed writes from now on: the bond is stored
            // now (`paired` comes before it is).
            for handle in links.active.keys { applySigningKey(handle) }
            bondsChanged()
        case .bondEvicted:
            // (Its IRK leaves the resolving list; the new bond's `bonded` follows.)
            bondsChanged()
        case .bondsChangedElsewhere:
            // Another program removed, added or changed bonds in the shared file: the
            // signing keys, the resolving list and the resolved addresses follow it.
            for handle in links.active.keys { applySigningKey(handle) }
            bondsChanged()
        default:
            break
        }
    }

    /// Gives the local server the CSRK and last SignCounter of `handle`'s bonded peer,
    /// so its Signed Write Commands verify (none: they are ignored).
    func applySigningKey(_ handle: UInt16) {
        let key = security.onLoop(handle) { $0.peerSigningKey(handle: $1) }.map {
            SigningKey(csrk: $0.csrk, counter: $0.counter,
                       security: LinkSecurity(encrypted: true, authenticated: $0.security.authenticated, keySize: $0.security.keySize))
        }
        server.onLoop((key, handle)) { $0.setSigningKey($1.0, connection: $1.1) }
    }

    /// A bonded client is who it says once the link is encrypted with the bond's key:
    /// its subscriptions come back (notifications flow without it writing the CCCDs
    /// again, Vol 3, Part G, §3.3.3.3), so do its Client Supported Features, and a
    /// database changed while it was away is said (Service Changed, or change-unaware
    /// with robust caching). Synchronous, on the loop, as the Security Manager emits
    /// the encryption: before the server takes the client's next PDU, whatever the
    /// threads' timing (a follower task did it before, racing that PDU).
    nonisolated func restoreBondedClient(_ handle: UInt16) {
        let server = self.server, security = self.security
        guard server.loop.inEventLoop, security.loop.inEventLoop, let bond = security.onLoop({ $0.bond(handle: handle) }) else { return }
        server.onLoop {
            $0.restoreClient(GATTServerState.ClientRecord(configurations: bond.clientConfigurations, supportedFeatures: bond.clientSupportedFeatures ?? 0,
                                                          awareOfHash: bond.serverDatabaseHash), connection: handle)
        }
    }

    /// Stores the GATT layout the program discovered on link `handle` with the peer's
    /// bond (`RemotePeripheral.storeServices`), once the link is bonded.
    func storeLayout(_ handle: UInt16) async {
        if let conn = links.active[handle], let remote = links.remotes[conn.id] { await remote.storeServices() }
    }

    /// The local server refused a peripheral link's request for its security: ask the
    /// central to pair or encrypt (Security Request) for `level`, once at a time.
    func securityNeeded(connection handle: UInt16, level: SecurityLevel) {
        guard securityOptions.requestSecurity, let conn = links.active[handle], conn.role == .peripheral,
              !links.securityRequested.contains(handle) else { return }
        links.securityRequested.insert(handle)
        let security = self.security
        Task { [weak self] in
            do { _ = try await security.secure(handle: handle, level: level) } catch {
                self?.logger.debug("security request unanswered", metadata: ["ble.handle": "\(handle)", "error": "\(error)"])
            }
            await self?.securityRequestEnded(handle)
        }
    }

    func securityRequestEnded(_ handle: UInt16) { links.securityRequested.remove(handle) }

    /// The security of `connection` now.
    public func security(of connection: Connection) async -> LinkSecurityState { await security.security(handle: connection.handle) }

    /// Brings `connection` to at least `level`: encrypts from a bond or pairs (central),
    /// or asks the central with a Security Request (peripheral). Throws `SecurityError`.
    @discardableResult
    public func secure(_ connection: Connection, level: SecurityLevel = .encrypted) async throws -> LinkSecurityState {
        await settle()
        guard isActive(connection.id) else { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        return try await security.secure(handle: connection.handle, level: level)
    }

    /// Fresh LE Secure Connections OOB data for this host (a new key pair and random,
    /// for our identity address, else the controller's): hand `shared` to the peer out
    /// of band (NFC, a QR code), then pass it to `setOutOfBand` as `local`.
    public func makeLocalOOBData() async throws -> LocalOOBData {
        if let id = own.identity { return try LocalOOBData(address: id.address, addressType: id.addressType, random: securityOptions.random) }
        let controllerAddress = await controller.info?.address ?? .zero
        return try LocalOOBData(address: controllerAddress, addressType: .public, random: securityOptions.random)
    }

    /// The OOB data the next pairings use (what we handed out, what the peer handed
    /// us, a legacy TK); nil stops using OOB.
    public func setOutOfBand(_ oob: OOBConfiguration?) async {
        var pairing = await security.configuration
        pairing.oob = oob
        await security.setConfiguration(pairing)
    }

    /// While the user types a passkey for `connection`: tells the peer a digit was
    /// entered or erased, or the entry cleared (keypress notifications, when both
    /// sides set `PairingConfiguration.keypressNotifications`).
    public func keypress(_ type: KeypressType, on connection: Connection) async {
        await security.keypress(type, handle: connection.handle)
    }

    /// Prompts, pairings, failures and new bonds on every link. Buffer: the newest 256.
    public nonisolated func securityEvents() async -> BufferedStream<SecurityEvent> { await security.events() }

    /// The stored bonds.
    public func bonds() async throws -> [Bond] { try await security.bonds() }

    /// Forgets the bond with `address`; returns whether there was one.
    @discardableResult
    public func removeBond(_ address: BluetoothAddress, type: AddressType) async throws -> Bool {
        defer { bondsChanged() }
        return try await security.removeBond(address: address, type: type)
    }

    func linkEnded(_ c: Connection, _ end: LinkEnd) {
        for w in links.ended(c.id, end) { w.resume(returning: end) }
    }

    /// How link `id` ended: waits for it (at most `limit`), nil if it is still up then.
    func end(of id: UInt64, within limit: Duration) async -> LinkEnd? {
        if let e = ended(id) { return e }
        let token = links.newWaiterToken()
        let timer = LoopTimer(after: limit, on: loop) { [weak self] in
            self?.onLoop { $0.stopWaiting(id, token) }
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { links.endWaiters[id, default: [:]][token] = $0 }
    }

    /// How link `id` ended, without waiting: nil while it is up.
    func ended(_ id: UInt64) -> LinkEnd? {
        if let e = links.ended[id] { return e }
        // Unknown: older than the ended-links memory, or never seen.
        return links.active.values.contains(where: { $0.id == id }) ? nil : .disconnected(.unknownConnectionIdentifier)
    }

    func stopWaiting(_ id: UInt64, _ token: UInt64) {
        links.endWaiters[id]?.removeValue(forKey: token)?.resume(returning: nil)
    }

    /// Whether link `id` is still up.
    func isActive(_ id: UInt64) -> Bool { links.active.values.contains { $0.id == id } }

    /// Sends Disconnect once the link's queued PDUs are out (handed to the controller and
    /// reported sent, at most 2 s) and waits (at most 5 s) for Disconnection Complete;
    /// returns the reason reported.
    @discardableResult
    public func disconnect(_ c: Connection, reason: HCIStatus = .remoteUserTerminatedConnection) async throws -> HCIStatus {
        await settle()
        // Requests queued on the bearer and not waited for (the CCCD writes of
        // subscriptions let go: only the first goes at once) are sent first, each after
        // the answer before it; then what was sent last (those, a Write Command, the keys
        // a pairing distributes) goes out, so the Disconnect cannot overtake it in the
        // controller.
        if isActive(c.id), let client = links.clients[c.id] { await client.bearer.queuedRequestsSent(within: .seconds(2)) }
        if isActive(c.id) { await l2cap.flush(handle: c.handle, within: .seconds(2)) }
        guard isActive(c.id) else { throw BLEError.disconnected(reason: links.ended[c.id].flatMap { if case let .disconnected(r) = $0 { r } else { nil } } ?? .unknownConnectionIdentifier) }
        try await controller.send(Disconnect(connectionHandle: c.handle, reason: reason))
        switch await end(of: c.id, within: .seconds(5)) {
        case let .disconnected(r)?: return r
        case let .transportClosed(r)?: throw BLEError.transportClosed(r)
        case nil: throw BLEError.notSupported("no Disconnection Complete for 0x\(hex4(c.handle)) within 5 s")
        }
    }
}
