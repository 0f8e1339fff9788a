// The command model (Core Specification v5.4, Vol 4, Part E, §5.4.1 and §7).
//
// Each command is a value type with its opcode, typed fields, an encoder and a
// throwing decoder. A command answered by Command Complete names the type of its
// return parameters (the bytes after Status); a command answered by Command Status
// sets `completesWithStatus` and its outcome arrives later as its own event.

public protocol HCICommand: Sendable, Equatable, FieldListing {
    associatedtype ReturnParameters: HCIReturnParameters = HCINoReturnParameters
    static var opcode: HCIOpcode { get }
    /// True when the controller answers with Command Status (the work finishes later).
    static var completesWithStatus: Bool { get }
    func encodeParameters(into w: inout ByteWriter)
    /// Decodes the parameters; throws `DecodeError` for malformed input.
    init(parameters r: inout ByteReader) throws
}

extension HCICommand {
    public static var completesWithStatus: Bool { false }

    public var parameters: [UInt8] {
        var w = ByteWriter()
        encodeParameters(into: &w)
        return w.bytes
    }

    public var packet: HCIPacket { .command(opcode: Self.opcode, parameters: parameters) }

    /// Decodes exactly these parameter bytes (trailing bytes are an error).
    public static func decode(_ parameters: [UInt8]) throws -> Self {
        var r = ByteReader(parameters, context: Self.opcode.description)
        let c = try Self(parameters: &r)
        try r.expectEnd()
        return c
    }
}

/// Return parameters of a Command Complete, after the Status byte.
public protocol HCIReturnParameters: Sendable, Equatable, FieldListing {
    init(returnParameters r: inout ByteReader) throws
    func encode(into w: inout ByteWriter)
}

public struct HCINoReturnParameters: HCIReturnParameters {
    public init() {}
    public init(returnParameters r: inout ByteReader) throws {}
    public func encode(into w: inout ByteWriter) {}
}

/// A command without parameters and without return parameters beyond Status.
public protocol HCIParameterlessCommand: HCICommand {
    init()
}

extension HCIParameterlessCommand {
    public func encodeParameters(into w: inout ByteWriter) {}
    public init(parameters r: inout ByteReader) throws { self.init() }
}

/// Every command type this stack encodes and decodes, by opcode; used by decoders
/// that meet a command or a Command Complete on the wire (trace show, replay).
public enum HCICommandRegistry {
    public static let types: [HCIOpcode: any HCICommand.Type] = {
        var d: [HCIOpcode: any HCICommand.Type] = [:]
        for t in all { d[t.opcode] = t }
        return d
    }()

    static let all: [any HCICommand.Type] = [
        Disconnect.self, ReadRemoteVersionInformation.self,
        SetEventMask.self, SetEventMaskPage2.self, Reset.self,
        ReadLocalVersionInformation.self, ReadLocalSupportedCommands.self, ReadLocalSupportedFeatures.self,
        ReadBufferSize.self, ReadBDADDR.self, ReadRSSI.self,
        LESetEventMask.self, LEReadBufferSize.self, LEReadBufferSizeV2.self, LEReadLocalSupportedFeatures.self,
        LEReadSupportedStates.self, LESetRandomAddress.self, LESetAdvertisingParameters.self,
        LEReadAdvertisingPhysicalChannelTxPower.self, LESetAdvertisingData.self, LESetScanResponseData.self,
        LESetAdvertisingEnable.self, LESetScanParameters.self, LESetScanEnable.self, LECreateConnection.self,
        LECreateConnectionCancel.self, LEConnectionUpdate.self, LEReadRemoteFeatures.self,
        LESetDataLength.self, LEReadSuggestedDefaultDataLength.self, LEWriteSuggestedDefaultDataLength.self, LEReadMaximumDataLength.self, LESetPHY.self, LESetDefaultPHY.self, LEReadPHY.self,
        LEReadFilterAcceptListSize.self, LEAddDeviceToFilterAcceptList.self,
        LERemoveDeviceFromFilterAcceptList.self, LEClearFilterAcceptList.self,
        LEEncrypt.self, LERand.self, LELongTermKeyRequestReply.self, LELongTermKeyRequestNegativeReply.self, LEEnableEncryption.self,
        LEAddDeviceToResolvingList.self, LERemoveDeviceFromResolvingList.self, LEClearResolvingList.self,
        LEReadResolvingListSize.self, LESetAddressResolutionEnable.self, LESetPrivacyMode.self,
        LESetAdvertisingSetRandomAddress.self, LESetExtendedAdvertisingParameters.self,
        LESetExtendedAdvertisingData.self, LESetExtendedScanResponseData.self,
        LESetExtendedAdvertisingEnable.self, LEReadMaximumAdvertisingDataLength.self,
        LEReadNumberOfSupportedAdvertisingSets.self, LERemoveAdvertisingSet.self, LEClearAdvertisingSets.self,
        LESetExtendedScanParameters.self, LESetExtendedScanEnable.self, LEExtendedCreateConnection.self,
        LESetPeriodicAdvertisingParameters.self, LESetPeriodicAdvertisingData.self, LESetPeriodicAdvertisingEnable.self,
        LEPeriodicAdvertisingCreateSync.self, LEPeriodicAdvertisingCreateSyncCancel.self, LEPeriodicAdvertisingTerminateSync.self,
        LEAddDeviceToPeriodicAdvertiserList.self, LERemoveDeviceFromPeriodicAdvertiserList.self,
        LEClearPeriodicAdvertiserList.self, LEReadPeriodicAdvertiserListSize.self,
    ]

    /// Decodes a command's parameters if the opcode is known; nil for unknown opcodes.
    public static func decode(opcode: HCIOpcode, parameters: [UInt8]) throws -> (any HCICommand)? {
        guard let t = types[opcode] else { return nil }
        return try t.decode(parameters)
    }

    /// Decodes Command Complete return parameters (after Status) for a known opcode.
    public static func decodeReturn(opcode: HCIOpcode, returnParameters: [UInt8]) throws -> (any HCIReturnParameters)? {
        guard let t = types[opcode] else { return nil }
        return try decodeReturn(t, returnParameters)
    }

    private static func decodeReturn<C: HCICommand>(_ t: C.Type, _ bytes: [UInt8]) throws -> any HCIReturnParameters {
        var r = ByteReader(bytes, context: "\(C.opcode) return parameters")
        return try C.ReturnParameters(returnParameters: &r)
    }
}
