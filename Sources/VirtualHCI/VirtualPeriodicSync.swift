// The virtual controller's periodic advertising and synchronisation to it (Core
// Specification v5.4, Vol 4, Part E, §7.8.61–§7.8.63 and §7.8.67–§7.8.69): the
// advertiser's trains live in its sets (VirtualAdvertising.swift); here a scanner's
// pending Create Sync, its syncs and the reports, losses and answers that go with them.

import HCI
import NIOCore

extension VirtualController {
    /// A train this controller follows.
    struct Sync {
        var address: BluetoothAddress
        /// 0 public, 1 random (Advertiser_Address_Type).
        var addressType: UInt8
        var sid: UInt8
        /// Sync_Timeout in 10 ms units.
        var timeout: UInt16
        /// The loss timer armed when the train went off air, by its run (nil: none armed).
        var lossRun: UInt64?

        func follows(_ t: PeriodicTrain) -> Bool { t.address == address && t.addressType.rawValue & 1 == addressType && t.sid == sid }
    }

    /// An entry of the Periodic Advertiser List: an advertiser's set.
    struct PeriodicAdvertiserEntry: Equatable {
        var address: BluetoothAddress
        /// 0 public, 1 random (Advertiser_Address_Type).
        var addressType: UInt8
        var sid: UInt8

        init(_ c: some LEPeriodicAdvertiserListEntryCommand) {
            address = c.advertiserAddress
            addressType = c.advertiserAddressType.rawValue
            sid = c.advertisingSID
        }

        func names(_ b: AirAdvertisement) -> Bool { b.address == address && b.addressType.rawValue & 1 == addressType && b.sid == sid }
    }

    /// Entries the Periodic Advertiser List holds (Rootcanal's default too).
    static let periodicAdvertiserListSize = 8

    /// Periodic advertising (§7.8.61–§7.8.63) and synchronisation to it (§7.8.67–§7.8.69).
    func handlePeriodic(_ op: HCIOpcode, _ p: [UInt8]) async throws {
        switch op {
        case .leSetPeriodicAdvertisingParameters:
            complete(op, status: sets.setPeriodicParameters(try LESetPeriodicAdvertisingParameters.decode(p)))
        case .leSetPeriodicAdvertisingData:
            complete(op, status: sets.setPeriodicData(try LESetPeriodicAdvertisingData.decode(p)))
        case .leSetPeriodicAdvertisingEnable:
            let (s, stopped) = sets.setPeriodicEnable(try LESetPeriodicAdvertisingEnable.decode(p))
            complete(op, status: s)
            if stopped { await radio?.periodicTrainsEnded(self) }
        case .lePeriodicAdvertisingCreateSync:
            let c = try LEPeriodicAdvertisingCreateSync.decode(p)
            guard pendingSync == nil, c.syncCTEType & 0x1F != 0x1F else { return status(op, .commandDisallowed) }
            guard c.skip <= 0x01F3, (0x000A...0x4000).contains(c.syncTimeout), c.advertiserAddressType.rawValue <= 1, c.advertisingSID <= 0x0F
            else { return status(op, .invalidCommandParameters) }
            // No ADI filtering, no Receive Enable here.
            guard c.options & 0x06 == 0 else { return status(op, .unsupportedFeatureOrParameterValue) }
            if c.options & 0x01 == 0, syncs.values.contains(where: { $0.address == c.advertiserAddress && $0.addressType == c.advertiserAddressType.rawValue && $0.sid == c.advertisingSID }) {
                return status(op, .connectionAlreadyExists)
            }
            pendingSync = c
            status(op)
            // Already scanning: the train is found at once if its set is on air.
            if scanning, extendedScan, let radio {
                establish(from: await radio.broadcasts(except: self).filter(scansPHY(of:)))
            }
        case .lePeriodicAdvertisingCreateSyncCancel:
            guard pendingSync != nil else { return complete(op, status: .commandDisallowed) }
            pendingSync = nil
            complete(op)
            if leEventMask & 1 << 13 != 0 {
                emit(.le(.periodicAdvertisingSyncEstablished(LEPeriodicAdvertisingSyncEstablished(
                    status: .operationCancelledByHost, syncHandle: 0, advertisingSID: 0, advertiserAddressType: .public,
                    advertiserAddress: .zero, advertiserPHY: 0, periodicAdvertisingInterval: 0))))
            }
        case .leAddDeviceToPeriodicAdvertiserList:
            let e = PeriodicAdvertiserEntry(try LEAddDeviceToPeriodicAdvertiserList.decode(p))
            guard pendingSync == nil else { return complete(op, status: .commandDisallowed) }
            guard e.addressType <= 1, e.sid <= 0x0F, !periodicAdvertiserList.contains(e) else { return complete(op, status: .invalidCommandParameters) }
            guard periodicAdvertiserList.count < Self.periodicAdvertiserListSize else { return complete(op, status: .memoryCapacityExceeded) }
            periodicAdvertiserList.append(e)
            complete(op)
        case .leRemoveDeviceFromPeriodicAdvertiserList:
            let e = PeriodicAdvertiserEntry(try LERemoveDeviceFromPeriodicAdvertiserList.decode(p))
            guard pendingSync == nil else { return complete(op, status: .commandDisallowed) }
            guard let i = periodicAdvertiserList.firstIndex(of: e) else { return complete(op, status: .unknownAdvertisingIdentifier) }
            periodicAdvertiserList.remove(at: i)
            complete(op)
        case .leClearPeriodicAdvertiserList:
            guard pendingSync == nil else { return complete(op, status: .commandDisallowed) }
            periodicAdvertiserList.removeAll()
            complete(op)
        case .leReadPeriodicAdvertiserListSize:
            complete(op, HCIOctetReturn(value: UInt8(Self.periodicAdvertiserListSize)))
        case .lePeriodicAdvertisingTerminateSync:
            let h = try LEPeriodicAdvertisingTerminateSync.decode(p).syncHandle
            guard syncs.removeValue(forKey: h) != nil else { return complete(op, status: .unknownAdvertisingIdentifier) }
            complete(op)
        default:
            complete(op, status: .unknownCommand)
        }
    }

    /// The pending Create Sync finds its train among `broadcasts` (an extended set
    /// whose AUX_ADV_IND carries SyncInfo): the one it names, or with Options bit 0
    /// the first one the Periodic Advertiser List names that no sync follows yet. The
    /// sync is established on the lowest free Sync_Handle.
    func establish(from broadcasts: [AirAdvertisement]) {
        guard let c = pendingSync else { return }
        let wanted: (AirAdvertisement) -> Bool
        if c.options & 0x01 != 0 {
            let list = periodicAdvertiserList, followed = syncs.values
            wanted = { b in
                list.contains { $0.names(b) } && !followed.contains { $0.address == b.address && $0.addressType == b.addressType.rawValue & 1 && $0.sid == b.sid }
            }
        } else {
            wanted = { $0.address == c.advertiserAddress && $0.addressType.rawValue & 1 == c.advertiserAddressType.rawValue && $0.sid == c.advertisingSID }
        }
        guard let b = broadcasts.first(where: { $0.periodicInterval != 0 && wanted($0) }) else { return }
        pendingSync = nil
        var h: UInt16 = 0
        while syncs[h] != nil { h += 1 }
        syncs[h] = Sync(address: b.address, addressType: b.addressType.rawValue & 1, sid: b.sid, timeout: c.syncTimeout)
        if leEventMask & 1 << 13 != 0 {
            emit(.le(.periodicAdvertisingSyncEstablished(LEPeriodicAdvertisingSyncEstablished(
                syncHandle: h, advertisingSID: b.sid, advertiserAddressType: b.addressType, advertiserAddress: b.address,
                periodicAdvertisingInterval: b.periodicInterval))))
        }
    }

    /// The periodic trains on air from this controller's sets.
    var periodicTrains: [PeriodicTrain] { sets.periodicTrains(publicAddress: address) }

    /// A periodic event of each of `trains`: every sync following one reports its data
    /// (in pieces of 247 octets, each but the last "incomplete, more data to come").
    func hearPeriodic(_ trains: [PeriodicTrain], rssi: Int8) {
        for (h, sync) in syncs.sorted(by: { $0.key < $1.key }) {
            guard let t = trains.first(where: sync.follows) else { continue }
            syncs[h]?.lossRun = nil
            guard leEventMask & 1 << 14 != 0 else { continue }
            var offset = 0
            repeat {
                let end = Swift.min(t.data.count, offset + LEPeriodicAdvertisingReport.maximumDataLength)
                emit(.le(.periodicAdvertisingReport(LEPeriodicAdvertisingReport(
                    syncHandle: h, rssi: rssi, dataStatus: end < t.data.count ? 1 : 0, data: Array(t.data[offset..<end])))))
                offset = end
            } while offset < t.data.count
        }
    }

    /// Trains went off air somewhere: each sync whose train is not among `onAir` is
    /// lost once its Sync_Timeout passes without the train coming back.
    func periodicTrainsChanged(onAir: [PeriodicTrain]) {
        for (h, sync) in syncs where sync.lossRun == nil && !onAir.contains(where: sync.follows) {
            syncRuns += 1
            let run = syncRuns
            syncs[h]?.lossRun = run
            _ = LoopTimer(after: .milliseconds(10 * Int(sync.timeout)), on: loop) { [weak self] in
                _ = self?.onLoop { c in Task { await c.syncTimeoutElapsed(h, run: run) } }
            }
        }
    }

    /// Sync `handle`'s timeout, armed by `run`, passed: lost unless its train came back.
    func syncTimeoutElapsed(_ handle: UInt16, run: UInt64) async {
        guard let sync = syncs[handle], sync.lossRun == run else { return }
        if let radio, await radio.periodicTrains(except: self).contains(where: sync.follows) {
            syncs[handle]?.lossRun = nil
            return
        }
        guard syncs[handle]?.lossRun == run else { return }
        syncs[handle] = nil
        if leEventMask & 1 << 15 != 0 { emit(.le(.periodicAdvertisingSyncLost(LEPeriodicAdvertisingSyncLost(syncHandle: handle)))) }
    }
}
