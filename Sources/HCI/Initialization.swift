// The LE host's controller initialisation (Core Specification v5.4, Vol 6, Part D,
// §2.1 "Initial setup" and Vol 4, Part E, §4): reset, read what the controller is
// and supports, size the ACL buffers, unmask the events the host handles.
//
// Optional commands are skipped when the controller says it lacks them (its
// Supported_Commands mask) and tolerated when it answers "Unknown HCI Command" or
// "Unsupported Feature or Parameter Value" anyway; what was skipped is recorded.

/// What the controller reported during `initialize()`.
public struct ControllerInfo: Sendable, Equatable {
    public var address: BluetoothAddress
    public var version: ReadLocalVersionInformation.ReturnParameters
    public var supportedCommands: SupportedCommands
    public var lmpFeatures: UInt64
    public var leFeatures: LEFeatures
    public var leSupportedStates: UInt64?
    /// BR/EDR ACL buffers (nil when the controller does not report them).
    public var aclBuffers: ReadBufferSize.ReturnParameters?
    /// LE ACL data length and count actually used for LE (shared BR/EDR buffers if LE reported 0).
    public var leACLDataPacketLength: Int
    public var totalNumLEACLDataPackets: Int
    /// ISO buffers from LE Read Buffer Size [v2], when supported.
    public var isoDataPacketLength: Int?
    public var totalNumISODataPackets: Int?
    public var maximumDataLength: LEReadMaximumDataLength.ReturnParameters?
    public var numberOfSupportedAdvertisingSets: Int?
    public var maximumAdvertisingDataLength: Int?
    /// Encryption Change [v2] is enabled (Set Event Mask Page 2 accepted): encryption
    /// changes come with the key size.
    public var encryptionChangeV2: Bool
    /// Optional commands that were not run or were refused, with the reason.
    public var skipped: [Skipped]

    public struct Skipped: Sendable, Equatable {
        public var opcode: HCIOpcode
        /// nil: not in the controller's Supported_Commands; otherwise the status it answered.
        public var status: HCIStatus?
    }

    public func supports(_ opcode: HCIOpcode) -> Bool { supportedCommands.supports(opcode) ?? false }
}

extension HCIController {
    /// The least an ACL buffer for LE holds (an LE Data PDU's payload without Data Length Extension).
    static let minimumLEDataLength = 27

    /// Runs the initialisation sequence and records the result in `info`. Throws
    /// `HCIError.malformedResponse` for a controller with no usable ACL buffer for LE.
    /// - Parameters:
    ///   - reset: send Reset first. Leave it off on an adapter shared with another
    ///     host stack (the kernel, over the HCI raw channel).
    ///   - extendedAdvertising: read the advertising sets' number and data length
    ///     when the controller has extended advertising. Off for a host that will use
    ///     the legacy advertising commands: those reads are extended advertising
    ///     commands, after which a controller refuses the legacy ones until Reset
    ///     (Vol 4, Part E, §3.1.1).
    @discardableResult
    public func initialize(reset: Bool = true, extendedAdvertising: Bool = true) async throws -> ControllerInfo {
        if reset { try await send(Reset()) }
        let version = try await send(ReadLocalVersionInformation())
        let commands = try await send(ReadLocalSupportedCommands()).supportedCommands
        let lmp = try await send(ReadLocalSupportedFeatures()).lmpFeatures
        let address = try await send(ReadBDADDR()).address
        var skipped: [ControllerInfo.Skipped] = []

        let acl = try await sendOptional(ReadBufferSize(), commands, &skipped)
        var leLength = 0, leCount = 0
        var isoLength: Int?, isoCount: Int?
        var leOpcode = LEReadBufferSize.opcode
        if commands.supports(.leReadBufferSizeV2) == true, let v2 = try await sendOptional(LEReadBufferSizeV2(), commands, &skipped) {
            leLength = Int(v2.leACLDataPacketLength)
            leCount = Int(v2.totalNumLEACLDataPackets)
            isoLength = Int(v2.isoDataPacketLength)
            isoCount = Int(v2.totalNumISODataPackets)
            leOpcode = LEReadBufferSizeV2.opcode
        } else {
            let v1 = try await send(LEReadBufferSize())
            leLength = Int(v1.leACLDataPacketLength)
            leCount = Int(v1.totalNumLEACLDataPackets)
        }
        // §7.8.2: a dedicated LE buffer holds at least 27 octets (an LE Data PDU's
        // payload); zero means LE shares the BR/EDR buffers, which must hold as much.
        // Below that, or with no buffer at all, no ACL could go out: refused here, as
        // Linux refuses it, instead of links whose every write waits forever.
        if leLength != 0, leLength < Self.minimumLEDataLength {
            throw HCIError.malformedResponse(opcode: leOpcode, .invalidValue(
                what: "LE_ACL_Data_Packet_Length (a dedicated LE buffer holds at least \(Self.minimumLEDataLength) octets)", value: leLength))
        }
        if leLength == 0 || leCount == 0 {
            leLength = Int(acl?.aclDataPacketLength ?? 0)
            leCount = Int(acl?.totalNumACLDataPackets ?? 0)
            guard leLength >= Self.minimumLEDataLength, leCount > 0 else {
                throw HCIError.malformedResponse(opcode: acl == nil ? leOpcode : ReadBufferSize.opcode, .invalidValue(
                    what: "ACL buffers for LE: none dedicated, and the shared ones (\(leCount) of \(leLength) octets) hold no LE Data PDU",
                    value: leLength))
            }
        }
        let leFeatures = try await send(LEReadLocalSupportedFeatures()).mask
        let states = try await sendOptional(LEReadSupportedStates(), commands, &skipped)?.mask
        try await send(SetEventMask())
        try await send(LESetEventMask())
        // Encryption Change [v2] carries the key size the link was encrypted with.
        let encryptionChangeV2 = try await sendOptional(SetEventMaskPage2(), commands, &skipped) != nil
        let maxData = try await sendOptional(LEReadMaximumDataLength(), commands, &skipped)
        var sets: Int?, maxAdv: Int?
        if extendedAdvertising, LEFeatures(rawValue: leFeatures).contains(bit: LEFeatures.extendedAdvertising) {
            sets = try await sendOptional(LEReadNumberOfSupportedAdvertisingSets(), commands, &skipped).map { Int($0.value) }
            maxAdv = try await sendOptional(LEReadMaximumAdvertisingDataLength(), commands, &skipped).map { Int($0.maxAdvertisingDataLength) }
        }
        setACLBufferCount(leCount)
        let info = ControllerInfo(
            address: address, version: version, supportedCommands: commands, lmpFeatures: lmp,
            leFeatures: LEFeatures(rawValue: leFeatures), leSupportedStates: states, aclBuffers: acl,
            leACLDataPacketLength: leLength, totalNumLEACLDataPackets: leCount, isoDataPacketLength: isoLength,
            totalNumISODataPackets: isoCount, maximumDataLength: maxData, numberOfSupportedAdvertisingSets: sets,
            maximumAdvertisingDataLength: maxAdv, encryptionChangeV2: encryptionChangeV2, skipped: skipped)
        record(info)
        return info
    }

    /// Sends an optional command: skipped when the controller's mask lacks it, tolerated
    /// when refused as unknown or unsupported. Either way the skip is recorded.
    private func sendOptional<C: HCICommand>(
        _ c: C, _ commands: SupportedCommands, _ skipped: inout [ControllerInfo.Skipped]
    ) async throws -> C.ReturnParameters? {
        if commands.supports(C.opcode) == false {
            skipped.append(.init(opcode: C.opcode, status: nil))
            return nil
        }
        do {
            return try await send(c)
        } catch let HCIError.commandFailed(_, status)
            where status == .unknownCommand || status == .unsupportedFeatureOrParameterValue {
            skipped.append(.init(opcode: C.opcode, status: status))
            return nil
        }
    }
}
