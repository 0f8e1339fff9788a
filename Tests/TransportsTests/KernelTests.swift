// Tests that need a real Linux kernel with Bluetooth: they run inside the QEMU guest
// (Scripts/guest.sh, BLE_GUEST=1) against BlueZ's btvirt controllers hci0 and hci1,
// and return at once anywhere else (this machine's kernel has no Bluetooth).

import Foundation
import HCI
import Logging
import Testing
@testable import Transports
#if canImport(Glibc)
import Glibc
#endif

enum Guest {
    static let active = ProcessInfo.processInfo.environment["BLE_GUEST"] == "1"
    static let unprivileged = ProcessInfo.processInfo.environment["BLE_GUEST_UNPRIVILEGED"] == "1"
    static let logger = Logger(label: "guest") { _ in SwiftLogNoOpLogHandler() }
}

@Suite(.serialized) struct KernelTests {
    @Test func adaptersAreListed() throws {
        guard Guest.active, !Guest.unprivileged else { return }
        let names = try BlueZ.adapters().map(\.name).sorted()
        #expect(names == ["hci0", "hci1"])
    }

    /// hci1 advertises through the raw channel (shared with the kernel), driven by our
    /// stack; our user-channel scanner on hci0 sees it with its name.
    @Test func userChannelScannerSeesRawChannelAdvertiser() async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        let adv = HCIController(transport: try BlueZ.open(index: 1, channel: .raw, logger: Guest.logger), logger: Guest.logger)
        let scan = HCIController(transport: try BlueZ.open(index: 0, channel: .user, logger: Guest.logger), logger: Guest.logger)
        do {
            try await advertiseAndScan(adv: adv, scan: scan)
        } catch {
            await scan.close()
            await adv.close()
            throw error
        }
    }

    func advertiseAndScan(adv: HCIController, scan: HCIController) async throws {
        let advInfo = try await adv.initialize(reset: false)
        let scanInfo = try await scan.initialize()
        #expect(scanInfo.address != advInfo.address)

        let name = Array("kernel-raw".utf8)
        // Controllers following older specification versions (btvirt among them) refuse
        // to disable advertising that is not enabled.
        do {
            try await adv.send(LESetAdvertisingEnable(advertisingEnable: false))
        } catch HCIError.commandFailed(_, .commandDisallowed) {}
        try await adv.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await adv.send(LESetAdvertisingData(data: ADStructure.encode([ADStructure(type: 1, data: [6]), ADStructure(type: 9, data: name)])))
        try await adv.send(LESetAdvertisingEnable(advertisingEnable: true))

        let events = await scan.events()
        try await scan.send(LESetScanParameters(scanType: 1))
        try await scan.send(LESetScanEnable(scanEnable: true))
        let report = await withTaskGroup(of: LEAdvertisingReport.Report?.self) { g in
            g.addTask {
                for await e in events {
                    if case let .le(.advertisingReport(r)) = e, let rp = r.reports.first(where: { $0.address == advInfo.address && !$0.data.isEmpty }) { return rp }
                }
                return nil
            }
            g.addTask { try? await Task.sleep(for: .seconds(20)); return nil }
            let first = await g.next() ?? nil
            g.cancelAll()
            return first
        }
        _ = try? await scan.send(LESetScanEnable(scanEnable: false))
        _ = try? await adv.send(LESetAdvertisingEnable(advertisingEnable: false))
        await scan.close()
        await adv.close()
        let r = try #require(report, "hci0 saw no advertisement from hci1 (\(advInfo.address)) in 20 s")
        #expect(ADStructure.parse(r.data).structures.first { $0.type == 9 }?.data == name)
    }

    @Test func busyAdapterIsExplained() async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        let first = try BlueZ.open(index: 0, channel: .user, logger: Guest.logger)
        defer { Task { await first.close() } }
        #expect {
            _ = try BlueZ.open(index: 0, channel: .user, logger: Guest.logger)
        } throws: { e in
            guard let e = e as? BlueZError else { return false }
            return e.errno == EBUSY && e.description.contains("bluetoothd") && e.description.contains("hci0:raw")
        }
        await first.close()
    }

    @Test func missingAdapterListsThePresentOnes() throws {
        guard Guest.active else { return }
        #expect {
            _ = try BlueZ.open(index: 7, channel: .user, logger: Guest.logger)
        } throws: { e in
            guard let e = e as? BlueZError else { return false }
            // Unprivileged, the kernel refuses before it looks the adapter up.
            return Guest.unprivileged ? e.errno == EPERM : (e.errno == ENODEV && e.description.contains("hci0") && e.description.contains("hci1"))
        }
    }

    /// Run as an unprivileged user (Scripts/test-guest.sh does, with BLE_GUEST_UNPRIVILEGED=1).
    @Test func missingCapabilityIsExplained() throws {
        guard Guest.active, Guest.unprivileged else { return }
        #expect {
            _ = try BlueZ.open(index: 0, channel: .user, logger: Guest.logger)
        } throws: { e in
            guard let e = e as? BlueZError else { return false }
            return e.errno == EPERM && e.description.contains("CAP_NET_ADMIN") && e.description.contains("setcap")
        }
        // Listing needs no privilege.
        #expect(try BlueZ.adapters().count == 2)
    }
}
